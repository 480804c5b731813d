"""Retries of S3 requests: which failures are worth another attempt, the backoff between
attempts, and the error a request ends with.

Retried (bounded by :attr:`RetryPolicy.attempts` and by :attr:`RetryPolicy.max_wait_s`, the
outage a request rides out: 90 s by default): throttling (503 SlowDown, 429), other 5xx,
request timeouts, and dropped or refused connections. Never retried: 412 (the caller decides,
see ``S3Bucket``), 404, access denied, an unknown bucket, any other 4xx. A retried mutating
request may have been applied by an earlier attempt whose response was lost; callers make
that harmless (unconditional writes are idempotent, conditional ones compare what is there).
"""

from __future__ import annotations

import random
from collections.abc import Callable

import attrs
import botocore.exceptions as bce

from statecraft.errors import ConfigError, ConfigIssue, ObjectRequestError

__all__ = ["Failure", "RetryPolicy", "TransferSettings", "classify"]

#: S3's smallest part of a multipart upload (every part but the last)
MIN_PART_SIZE = 5 << 20
#: S3's largest part
MAX_PART_SIZE = 5 << 30
#: S3's largest number of parts in one upload
MAX_PARTS = 10_000

_THROTTLING = {"SlowDown", "Throttling", "ThrottlingException", "TooManyRequests"}
_TRANSIENT = {"InternalError", "RequestTimeout", "ServiceUnavailable", "RequestTimeTooSkewed"}
_ACCESS = {"AccessDenied", "SignatureDoesNotMatch", "InvalidAccessKeyId", "403"}


def _positive(path: str, value: float, allowed: str) -> None:
    if value <= 0:
        raise ConfigError([ConfigIssue(path, value, allowed)], source="S3 client settings")


@attrs.frozen
class RetryPolicy:
    """Bounded attempts with exponential backoff and full jitter, within a time budget.

    Attempt ``n`` (1-based) that fails waits ``uniform(0, min(max_delay_s, base_delay_s *
    2**(n-1)))`` before the next one. A request gives up after ``attempts`` attempts or once
    ``max_wait_s`` seconds have passed since its first attempt, whichever comes first; the
    last pause is shortened so that one attempt is made at the end of the budget. The
    defaults ride out an outage of the service (a restart, a failover, a network blip) of
    about ``max_wait_s`` = 90 s. ``knob`` names the setting that changes the budget in the
    error a request ends with (``checkpoint_store.retry_wait_s`` for a direct primary).

    Raises:
        ConfigError: ``attempts`` < 1 or a delay or budget that is not positive.
    """

    attempts: int = 1000
    base_delay_s: float = 0.05
    max_delay_s: float = 5.0
    max_wait_s: float = 90.0
    knob: str = "RetryPolicy(max_wait_s=...)"

    def __attrs_post_init__(self) -> None:
        _positive("attempts", self.attempts, "an integer >= 1")
        _positive("base_delay_s", self.base_delay_s, "seconds > 0")
        _positive("max_delay_s", self.max_delay_s, "seconds > 0")
        _positive("max_wait_s", self.max_wait_s, "seconds > 0")

    def delay(
        self, attempt: int, uniform: Callable[[float, float], float] = random.uniform
    ) -> float:
        """Seconds to wait after failed attempt ``attempt`` (1-based)."""
        return uniform(0.0, min(self.max_delay_s, self.base_delay_s * 2 ** (attempt - 1)))

    def next_pause(self, attempt: int, elapsed_s: float) -> float | None:
        """The pause before the attempt after failed attempt ``attempt``, ``elapsed_s``
        seconds after the first one began; ``None`` when the budget is spent."""
        left = self.max_wait_s - elapsed_s
        if attempt >= self.attempts or left <= 0:
            return None
        return min(self.delay(attempt), left)


@attrs.frozen
class TransferSettings:
    """How large objects move: files above ``part_size`` go by multipart, at most
    ``concurrency`` parts in flight (memory held: ``part_size * concurrency``, 80 MiB by
    default). The defaults are boto3's ``TransferConfig`` ones (8 MiB parts, 10 threads);
    ``chunk_size`` is the read size of hashing and of a ranged GET's body.

    Raises:
        ConfigError: ``part_size`` outside S3's 5 MiB..5 GiB, or ``concurrency`` < 1.
    """

    part_size: int = 8 << 20
    concurrency: int = 10
    chunk_size: int = 1 << 20

    def __attrs_post_init__(self) -> None:
        if not MIN_PART_SIZE <= self.part_size <= MAX_PART_SIZE:
            raise ConfigError(
                [ConfigIssue("part_size", self.part_size, "5 MiB..5 GiB (S3's part limits)")],
                source="S3 transfer settings",
            )
        _positive("concurrency", self.concurrency, "an integer >= 1")
        _positive("chunk_size", self.chunk_size, "bytes > 0")

    def part_size_for(self, size: int) -> int:
        """The part size for an object of ``size`` bytes: ``part_size``, grown when the
        object would otherwise need more than 10,000 parts."""
        return max(self.part_size, -(-size // MAX_PARTS))


@attrs.frozen
class Failure:
    """What one failed request means: ``status`` (HTTP, 0 without a response), ``code`` (the
    S3 error code or the exception's name), ``retryable``, and ``message`` (safe to log)."""

    status: int
    code: str
    retryable: bool
    message: str

    @property
    def precondition(self) -> bool:
        return self.status == 412 or self.code == "PreconditionFailed"

    @property
    def not_found(self) -> bool:
        return self.code in ("NoSuchKey", "404", "NotFound") or (
            self.status == 404 and self.code != "NoSuchBucket"
        )

    @property
    def access_denied(self) -> bool:
        return self.code in _ACCESS or self.status == 403


def classify(error: BaseException) -> Failure | None:
    """The :class:`Failure` an exception from botocore stands for; ``None`` for anything
    else (a bug, a local I/O error), which the caller re-raises unchanged."""
    if isinstance(error, bce.ClientError):
        response = error.response
        status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        info = response.get("Error", {})
        code = str(info.get("Code") or status)
        message = str(info.get("Message") or "")
        retryable = (
            code in _THROTTLING or code in _TRANSIENT or status == 429 or 500 <= status < 600
        )
        return Failure(status, code, retryable, message)
    if isinstance(error, bce.NoCredentialsError | bce.ParamValidationError):
        return Failure(0, type(error).__name__, False, str(error))
    if isinstance(error, bce.ConnectionError | bce.HTTPClientError | bce.IncompleteReadError):
        return Failure(0, type(error).__name__, True, _connection_message(error))
    return None


def _connection_message(error: BaseException) -> str:
    if isinstance(error, bce.EndpointConnectionError):
        return "could not connect to the endpoint"
    if isinstance(error, bce.ReadTimeoutError | bce.ConnectTimeoutError):
        return "timed out"
    if isinstance(error, bce.IncompleteReadError):
        return "the response body ended early"
    return "the connection was dropped"


def request_error(
    where: str,
    op: str,
    key: str,
    failure: Failure,
    attempts: int,
    fix: str,
    budget: str = "",
) -> ObjectRequestError:
    """The error a request ends with, naming the destination, the request, what the server
    (or the connection) said, how many attempts were made (and ``budget``: how long, when
    the time budget ran out, and its knob) and what to do."""
    said = f"{failure.code} {failure.status}" if failure.status else failure.code
    detail = f": {failure.message}" if failure.message else ""
    tried = f" after {attempts} attempt(s)" if attempts > 1 else ""
    if tried and budget:
        tried += f" {budget}"
    return ObjectRequestError(
        f"{where}: {op} {key!r} failed{tried} ({said}{detail}). {fix}",
        op=op,
        key=key,
        status=failure.status,
        error_code=failure.code,
        attempts=attempts,
    )
