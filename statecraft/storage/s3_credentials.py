"""Object-store credentials: a JSON file read once, validated, and never echoed.

The file holds one object::

    {"endpoint_url": "https://s3.example.com", "region": "us-east-1",
     "aws_access_key_id": "AKIA...", "aws_secret_access_key": "..."}

Contract: the secret key appears in no ``repr``, log line, error message or record written by
statecraft. What identifies a destination for logs and markers is :class:`S3Identity` (endpoint
authority, bucket, access key id), built by :meth:`S3Credentials.redacted`.
"""

from __future__ import annotations

import json
import os
import urllib.parse
from pathlib import Path
from typing import Any

import attrs

from statecraft.errors import CredentialsError

__all__ = ["CREDENTIAL_KEYS", "S3Credentials", "S3Identity", "load_credentials"]

#: every key a credentials file must hold (each a non-empty string)
CREDENTIAL_KEYS = ("endpoint_url", "region", "aws_access_key_id", "aws_secret_access_key")


@attrs.frozen
class S3Identity:
    """The non-secret identity of an object-store destination, safe to log and record.

    ``endpoint`` is the URL's authority (``host:port``), never its path or query.
    """

    endpoint: str
    bucket: str
    access_key_id: str

    def __str__(self) -> str:
        bucket = f"/{self.bucket}" if self.bucket else ""
        return f"{self.endpoint}{bucket} (key id {self.access_key_id})"


@attrs.frozen
class S3Credentials:
    """Endpoint, region and keys for one S3-compatible service.

    The secret is kept out of ``repr`` and equality output; read it only to build a client.
    """

    endpoint_url: str
    region: str
    aws_access_key_id: str
    aws_secret_access_key: str = attrs.field(repr=False)
    source: str = ""

    @property
    def endpoint_authority(self) -> str:
        """``host:port`` of the endpoint (what logs and markers name)."""
        return urllib.parse.urlsplit(self.endpoint_url).netloc.rsplit("@", 1)[-1]

    def redacted(self, bucket: str = "") -> S3Identity:
        """The identity of ``bucket`` at this endpoint, without the secret."""
        return S3Identity(self.endpoint_authority, bucket, self.aws_access_key_id)

    def scrub(self, text: str) -> str:
        """``text`` with every occurrence of the secret replaced by ``***`` (a last guard on
        messages built from a server's or a library's words)."""
        secret = self.aws_secret_access_key
        return text.replace(secret, "***") if secret else text


def load_credentials(path: str | os.PathLike[str]) -> S3Credentials:
    """Read and validate a credentials file.

    Raises:
        CredentialsError: the file is missing or unreadable, is not a JSON object, lacks a
            key, holds a non-string or empty value, or names an endpoint that is not an
            ``http(s)://host[:port]`` URL. The message names the file and the key, never a
            value of the secret.
    """
    where = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise _problem(where, "no such file; write the JSON credentials file there") from None
    except (OSError, UnicodeDecodeError) as error:
        raise _problem(where, f"cannot be read ({type(error).__name__})") from None
    try:
        raw: Any = json.loads(text)
    except json.JSONDecodeError as error:
        # the position only: the decoder's message never quotes the document
        raise _problem(
            where, f"is not valid JSON (line {error.lineno}, column {error.colno})"
        ) from None
    if not isinstance(raw, dict):
        raise _problem(where, f"must hold a JSON object, got a {type(raw).__name__}")
    missing = [k for k in CREDENTIAL_KEYS if k not in raw]
    if missing:
        raise _problem(where, f"missing key(s) {', '.join(missing)}; expected all of {_keys()}")
    bad = [k for k in CREDENTIAL_KEYS if not isinstance(raw[k], str) or not raw[k].strip()]
    if bad:
        raise _problem(where, f"key(s) {', '.join(bad)} must be non-empty strings")
    unknown = sorted(set(raw) - set(CREDENTIAL_KEYS))
    if unknown:
        raise _problem(where, f"unknown key(s) {', '.join(unknown)}; expected only {_keys()}")
    endpoint = raw["endpoint_url"].strip()
    parts = urllib.parse.urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _problem(
            where,
            f"endpoint_url {endpoint!r} must be an http:// or https:// URL with a host "
            "(e.g. https://s3.example.com or http://127.0.0.1:8333)",
        )
    if parts.username or parts.password:
        raise _problem(where, "endpoint_url must not carry a user or password; use the keys")
    return S3Credentials(
        endpoint_url=endpoint,
        region=raw["region"].strip(),
        aws_access_key_id=raw["aws_access_key_id"].strip(),
        aws_secret_access_key=raw["aws_secret_access_key"],
        source=where,
    )


def _keys() -> str:
    return ", ".join(CREDENTIAL_KEYS)


def _problem(path: str, problem: str) -> CredentialsError:
    return CredentialsError(f"credentials file {path}: {problem}", path=path, problem=problem)
