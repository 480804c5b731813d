"""Object-store credentials: where the keys come from, validated, and never echoed.

Three sources, named by one string (``checkpoint_store.credentials``, ``upload.credentials``,
``--credentials``; see :func:`open_credentials`):

* ``""`` or ``"default"``: boto3's default credential chain: the environment
  (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_SESSION_TOKEN``), ``AWS_PROFILE`` and
  the files ``~/.aws/config``/``~/.aws/credentials`` (or ``AWS_CONFIG_FILE``/
  ``AWS_SHARED_CREDENTIALS_FILE``), SSO, web identity (EKS IRSA), container and instance roles.
  The endpoint is the one the AWS configuration names (``AWS_ENDPOINT_URL_S3``,
  ``AWS_ENDPOINT_URL``, a profile's ``endpoint_url``), else AWS itself.
* ``"profile:NAME"``: the named profile of those files.
* anything else: the path of a JSON file holding one object, every key optional::

    {"endpoint_url": "http://127.0.0.1:8333", "region": "us-east-1",
     "aws_access_key_id": "AKIA...", "aws_secret_access_key": "...",
     "aws_session_token": "...", "profile": "..."}

  ``endpoint_url`` is for MinIO, SeaweedFS and other on-premises services (omit it for AWS).
  The two keys go together; a session token needs them; ``profile`` excludes them; a file
  with neither keys nor a profile uses the default chain with its endpoint and region.

Contract: the secret key and the session token appear in no ``repr``, log line, error message
or record written by statecraft; an error about refused keys names the source and at most
the last four characters of the key id. What identifies a destination for logs and markers
is :class:`S3Identity` (endpoint authority, bucket, access key id), built by
:meth:`S3Credentials.redacted`.
"""

from __future__ import annotations

import json
import os
import urllib.parse
from pathlib import Path
from typing import Any

import attrs

from statecraft.errors import CredentialsError

__all__ = [
    "CREDENTIAL_KEYS",
    "DEFAULT_CHAIN",
    "PROFILE_PREFIX",
    "S3Credentials",
    "S3Identity",
    "load_credentials",
    "open_credentials",
]

#: every key a credentials file may hold (each, when present, a non-empty string)
CREDENTIAL_KEYS = (
    "endpoint_url",
    "region",
    "aws_access_key_id",
    "aws_secret_access_key",
    "aws_session_token",
    "profile",
)
#: the credentials setting naming boto3's default chain (as does an empty one)
DEFAULT_CHAIN = "default"
#: the prefix of a credentials setting naming a profile: ``profile:NAME``
PROFILE_PREFIX = "profile:"

#: how botocore names where it found credentials -> words for an error message
_METHODS = {
    "env": "the environment (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)",
    "shared-credentials-file": "the shared credentials file",
    "config-file": "the AWS config file",
    "iam-role": "the instance role (EC2 instance metadata)",
    "container-role": "the container role (ECS/EKS credentials endpoint)",
    "assume-role": "an assumed role (role_arn of the profile)",
    "assume-role-with-web-identity": "web identity (AWS_WEB_IDENTITY_TOKEN_FILE, e.g. EKS IRSA)",
    "sso": "AWS SSO (aws sso login)",
    "custom-process": "the profile's credential_process",
}


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
    """Endpoint, region and where the keys come from, for one S3-compatible service.

    Empty fields are left to boto3 (its default chain, the AWS configuration's endpoint and
    region). ``source`` names where these came from, for error messages. The secret and the
    session token are kept out of ``repr``; read them only to build a client.
    """

    endpoint_url: str = ""
    region: str = ""
    aws_access_key_id: str = ""
    aws_secret_access_key: str = attrs.field(default="", repr=False)
    source: str = ""
    aws_session_token: str = attrs.field(default="", repr=False)
    profile: str = ""

    @property
    def endpoint_authority(self) -> str:
        """``host:port`` of the endpoint (what logs and markers name); for AWS's own
        endpoint before a client resolved it, ``s3.amazonaws.com``."""
        if not self.endpoint_url:
            return "s3.amazonaws.com"
        return urllib.parse.urlsplit(self.endpoint_url).netloc.rsplit("@", 1)[-1]

    @property
    def key_hint(self) -> str:
        """The key id as an error message may show it: its last four characters."""
        key = self.aws_access_key_id
        return f"...{key[-4:]}" if key else "(none)"

    def redacted(self, bucket: str = "") -> S3Identity:
        """The identity of ``bucket`` at this endpoint, without the secret."""
        return S3Identity(self.endpoint_authority, bucket, self.aws_access_key_id)

    def scrub(self, text: str) -> str:
        """``text`` with every occurrence of the secret and the session token replaced by
        ``***`` (a last guard on messages built from a server's or a library's words)."""
        for secret in (self.aws_secret_access_key, self.aws_session_token):
            if secret:
                text = text.replace(secret, "***")
        return text

    def session(self) -> tuple[Any, S3Credentials]:
        """A boto3 session for these credentials, and these credentials completed with what
        the session resolved (the key id, the secret and token to scrub, the source).

        Raises:
            CredentialsError: an unknown profile, or no credentials anywhere in the chain.
        """
        import boto3
        import botocore.exceptions as bce

        where = self.source or "the default AWS credential chain"
        try:
            if self.aws_access_key_id:
                session = boto3.session.Session(
                    aws_access_key_id=self.aws_access_key_id,
                    aws_secret_access_key=self.aws_secret_access_key,
                    aws_session_token=self.aws_session_token or None,
                    region_name=self.region or None,
                )
                return session, self
            session = boto3.session.Session(
                profile_name=self.profile or None, region_name=self.region or None
            )
            found = session.get_credentials()
        except bce.ProfileNotFound:
            raise CredentialsError(
                f"{where}: AWS profile {self.profile or os.environ.get('AWS_PROFILE')!r} is "
                "not in the AWS config files (AWS_CONFIG_FILE, AWS_SHARED_CREDENTIALS_FILE or "
                "~/.aws); add it there or name another profile",
                path=self.source or None,
                problem="unknown profile",
            ) from None
        except bce.BotoCoreError as error:  # a malformed config file, an SSO token expired...
            raise CredentialsError(
                f"{where}: the AWS configuration could not be read ({type(error).__name__}); "
                "fix it (aws configure list) or give a credentials file",
                path=self.source or None,
                problem=type(error).__name__,
            ) from None
        if found is None:
            raise CredentialsError(
                f"{where}: no AWS credentials found (environment, AWS_PROFILE and ~/.aws, "
                "SSO, web identity, container and instance roles were tried); set them there "
                "or give a credentials file with aws_access_key_id and aws_secret_access_key",
                path=self.source or None,
                problem="no credentials",
            )
        frozen = found.get_frozen_credentials()
        method = str(getattr(found, "method", "") or "")
        how = _METHODS.get(method, method or "the default chain")
        profile = self.profile or session.profile_name
        if method in ("shared-credentials-file", "config-file", "assume-role", "sso"):
            how = f"{how}, profile {profile!r}"
        source = f"{self.source} via {how}" if self.source else f"AWS credentials from {how}"
        resolved = attrs.evolve(
            self,
            region=self.region or str(session.region_name or ""),
            aws_access_key_id=str(frozen.access_key or ""),
            aws_secret_access_key=str(frozen.secret_key or ""),
            aws_session_token=str(frozen.token or ""),
            source=source,
        )
        return session, resolved


def open_credentials(
    setting: str | os.PathLike[str], *, base: str | os.PathLike[str] | None = None
) -> S3Credentials:
    """The credentials a setting names (see the module contract): ``""``/``"default"`` for
    boto3's default chain, ``"profile:NAME"`` for a profile, else a JSON file (a relative
    path resolved against ``base``, default the current directory).

    Raises:
        CredentialsError: ``profile:`` without a name, or a bad file (:func:`load_credentials`).
    """
    text = os.fspath(setting).strip()
    if text in ("", DEFAULT_CHAIN):
        return S3Credentials()
    if text.startswith(PROFILE_PREFIX):
        name = text[len(PROFILE_PREFIX) :].strip()
        if not name:
            raise CredentialsError(
                f"credentials {text!r}: give the profile's name, e.g. profile:training",
                path=None,
                problem="empty profile name",
            )
        return S3Credentials(profile=name, source=f"AWS profile {name!r}")
    candidate = Path(text).expanduser()
    if not candidate.is_absolute():
        candidate = Path(base if base is not None else os.getcwd()) / candidate
    return load_credentials(candidate)


def load_credentials(path: str | os.PathLike[str]) -> S3Credentials:
    """Read and validate a credentials file.

    Raises:
        CredentialsError: the file is missing or unreadable, is not a JSON object, holds an
            unknown key, a non-string or empty value, one key without the other, a session
            token without keys, keys and a profile, or an endpoint that is not an
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
    unknown = sorted(set(raw) - set(CREDENTIAL_KEYS))
    if unknown:
        raise _problem(where, f"unknown key(s) {', '.join(unknown)}; expected only {_keys()}")
    bad = [k for k in CREDENTIAL_KEYS if k in raw and not _text(raw[k])]
    if bad:
        raise _problem(where, f"key(s) {', '.join(bad)} must be non-empty strings")
    _check_combination(where, raw)
    endpoint = str(raw.get("endpoint_url", "")).strip()
    if endpoint:
        _check_endpoint(where, endpoint)
    return S3Credentials(
        endpoint_url=endpoint,
        region=str(raw.get("region", "")).strip(),
        aws_access_key_id=str(raw.get("aws_access_key_id", "")).strip(),
        aws_secret_access_key=str(raw.get("aws_secret_access_key", "")),
        aws_session_token=str(raw.get("aws_session_token", "")),
        profile=str(raw.get("profile", "")).strip(),
        source=f"credentials file {where}",
    )


def _text(value: object) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _check_combination(where: str, raw: dict[str, Any]) -> None:
    has_id, has_secret = "aws_access_key_id" in raw, "aws_secret_access_key" in raw
    if has_id != has_secret:
        missing = "aws_secret_access_key" if has_id else "aws_access_key_id"
        raise _problem(
            where,
            f"missing key(s) {missing}; aws_access_key_id and aws_secret_access_key go "
            "together (or omit both to use a profile or the default AWS credential chain)",
        )
    if "aws_session_token" in raw and not has_id:
        raise _problem(where, "aws_session_token needs aws_access_key_id and aws_secret_access_key")
    if "profile" in raw and has_id:
        raise _problem(where, "give profile or the keys, not both")


def _check_endpoint(where: str, endpoint: str) -> None:
    parts = urllib.parse.urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _problem(
            where,
            f"endpoint_url {endpoint!r} must be an http:// or https:// URL with a host "
            "(e.g. https://s3.example.com or http://127.0.0.1:8333)",
        )
    if parts.username or parts.password:
        raise _problem(where, "endpoint_url must not carry a user or password; use the keys")


def _keys() -> str:
    return ", ".join(CREDENTIAL_KEYS)


def _problem(path: str, problem: str) -> CredentialsError:
    return CredentialsError(f"credentials file {path}: {problem}", path=path, problem=problem)
