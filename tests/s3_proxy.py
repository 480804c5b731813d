"""A loopback HTTP proxy in front of the S3 server that injects faults on chosen requests.

Clients send their requests to :attr:`FaultProxy.endpoint_url` (signed for that host, which
the proxy forwards unchanged, so signatures still verify). Faults, each matched by method and
a substring of the path and used a given number of times:

- ``SLOWDOWN``: answer 503 SlowDown without forwarding (not applied);
- ``INTERNAL_ERROR``: answer 500 InternalError without forwarding (not applied);
- ``DROP_REQUEST``: read half the request body, then close (not applied);
- ``DROP_MID_BODY``: forward, send the status, the headers and half the response body, then
  close (applied);
- ``LOST_RESPONSE``: forward, then close without answering (applied, the client never knows);
- ``HOOK``: run the rule's callable (another client's write, a server crash), then forward.
"""

from __future__ import annotations

import enum
import http.client
import socket
import socketserver
import threading
from collections.abc import Callable
from typing import Any

import attrs


class Fault(enum.Enum):
    SLOWDOWN = "slowdown"
    INTERNAL_ERROR = "internal_error"
    DROP_REQUEST = "drop_request"
    DROP_MID_BODY = "drop_mid_body"
    LOST_RESPONSE = "lost_response"
    HOOK = "hook"


@attrs.define
class Rule:
    fault: Fault
    method: str
    path_contains: str
    times: int
    hook: Callable[[], None] | None = None
    hits: int = 0


_ERRORS = {
    Fault.SLOWDOWN: (503, "Slow Down", "SlowDown", "Please reduce your request rate."),
    Fault.INTERNAL_ERROR: (500, "Internal Server Error", "InternalError", "Injected."),
}


class FaultProxy:
    """The proxy, serving on a free loopback port from a daemon thread until :meth:`close`."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.rules: list[Rule] = []
        self.requests: list[tuple[str, str, str]] = []  # (method, path, outcome)
        self._lock = threading.Lock()
        proxy = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                proxy._serve(self.connection, self.rfile)

        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.endpoint_url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def inject(
        self,
        fault: Fault,
        *,
        method: str,
        path_contains: str = "",
        times: int = 1,
        hook: Callable[[], None] | None = None,
    ) -> Rule:
        """Apply ``fault`` to the next ``times`` requests of ``method`` whose path (with the
        query) contains ``path_contains`` (``hook``: what ``Fault.HOOK`` runs)."""
        rule = Rule(fault, method.upper(), path_contains, times, hook)
        with self._lock:
            self.rules.append(rule)
        return rule

    def overwrite_on_get(
        self, client: Any, bucket: str, key: str, body: bytes = b"v2" * 1000
    ) -> Rule:
        """At the next GET of ``key``, before it is forwarded, ``client`` overwrites the object
        with ``body`` (an object replaced mid-download)."""
        return self.inject(
            Fault.HOOK,
            method="GET",
            path_contains=key,
            hook=lambda: client.put_object(Bucket=bucket, Key=key, Body=body),
        )

    def clear(self) -> None:
        with self._lock:
            self.rules.clear()
            self.requests.clear()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _match(self, method: str, path: str) -> Fault | None:
        with self._lock:
            for rule in self.rules:
                if rule.hits < rule.times and rule.method == method and rule.path_contains in path:
                    rule.hits += 1
                    break
            else:
                return None
        if rule.fault is Fault.HOOK and rule.hook is not None:
            rule.hook()
        return rule.fault

    def _serve(self, conn: socket.socket, rfile) -> None:
        upstream = http.client.HTTPConnection("127.0.0.1", self.upstream_port, timeout=60)
        try:
            while True:
                line = rfile.readline(65537)
                if not line or line in (b"\r\n", b"\n"):
                    return
                method, path, _ = line.decode("latin-1").split(" ", 2)
                headers: list[tuple[str, str]] = []
                while True:
                    header = rfile.readline(65537)
                    if header in (b"\r\n", b"\n", b""):
                        break
                    name, _, value = header.decode("latin-1").partition(":")
                    headers.append((name.strip(), value.strip()))
                lower = {n.lower(): v for n, v in headers}
                length = int(lower.get("content-length", "0") or 0)
                if lower.get("expect", "").lower() == "100-continue":
                    conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
                    headers = [(n, v) for n, v in headers if n.lower() != "expect"]
                fault = self._match(method, path)
                if fault is Fault.DROP_REQUEST:
                    rfile.read(length // 2)
                    self._record(method, path, fault.value)
                    return
                body = rfile.read(length) if length else b""
                if fault in _ERRORS:
                    self._record(method, path, fault.value)
                    conn.sendall(_error_response(*_ERRORS[fault]))
                    continue
                try:
                    upstream.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
                    for name, value in headers:
                        upstream.putheader(name, value)
                    upstream.endheaders(body or None)
                    response = upstream.getresponse()
                    payload = response.read()
                except (ConnectionError, OSError, http.client.HTTPException):
                    self._record(method, path, "upstream_down")
                    return
                shown = fault.value if fault and fault is not Fault.HOOK else None
                self._record(method, path, shown or str(response.status))
                if fault is Fault.LOST_RESPONSE:
                    return
                head = _response_head(response, payload, method)
                if fault is Fault.DROP_MID_BODY:
                    conn.sendall(head + payload[: len(payload) // 2])
                    return
                conn.sendall(head + payload)
                if response.will_close:
                    return
        except (ConnectionError, OSError):
            return
        finally:
            upstream.close()
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _record(self, method: str, path: str, outcome: str) -> None:
        with self._lock:
            self.requests.append((method, path, outcome))


def _response_head(response: http.client.HTTPResponse, payload: bytes, method: str) -> bytes:
    lines = [f"HTTP/1.1 {response.status} {response.reason}"]
    for name, value in response.getheaders():
        if name.lower() in ("transfer-encoding", "connection"):
            continue
        if name.lower() == "content-length" and method != "HEAD":
            continue
        lines.append(f"{name}: {value}")
    if method != "HEAD":
        lines.append(f"Content-Length: {len(payload)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _error_response(status: int, reason: str, code: str, message: str) -> bytes:
    body = (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
        f"<Message>{message}</Message><RequestId>proxy</RequestId></Error>"
    ).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/xml\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    return head + body
