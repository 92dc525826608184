"""An object-store location, `s3://bucket/prefix`, and the environment that says where and as whom to reach it.

The endpoint and region are IOOptions.endpoint and IOOptions.region where given (or CKPTIO_ENDPOINT,
CKPTIO_REGION), else read the AWS way from the environment: AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL (else AWS's
regional endpoint), AWS_REGION or AWS_DEFAULT_REGION (else us-east-1). Credentials come only from the environment:
AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (/ AWS_SESSION_TOKEN) read by the CRT itself. A location never holds
credentials, and no file (~/.aws) is read: a checkpoint location is untrusted input.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from ..errors import InvalidLocation

SCHEME = "s3"
#: S3's rules for a bucket name (3-63 characters of lowercase letters, digits, '.' and '-'; not an IP address).
BUCKET = re.compile(r"(?!\d+\.\d+\.\d+\.\d+$)[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
MAX_KEY_BYTES = 1024 - 128  # S3's key limit, less room for the names a checkpoint puts under its prefix
_UNSAFE = re.compile(r"[\x00-\x1f\x7f\\]")


@dataclass(frozen=True)
class ObjectLocation:
    """A bucket and a key prefix (no leading or trailing '/'; '' is the bucket's root)."""

    bucket: str
    prefix: str

    def key(self, name: str) -> str:
        """The key of `name` directly under this prefix."""
        return f"{self.prefix}/{name}" if self.prefix else name

    def child(self, name: str) -> ObjectLocation:
        """The location one level down."""
        return ObjectLocation(self.bucket, self.key(name))

    @property
    def parent(self) -> ObjectLocation:
        """The location one level up (the bucket's root stays the root)."""
        return ObjectLocation(self.bucket, self.prefix.rpartition("/")[0])

    @property
    def name(self) -> str:
        """The last segment of the prefix."""
        return self.prefix.rpartition("/")[2]

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


def is_object_url(location: object) -> bool:
    """Whether `location` is an `s3://` URL (a path or anything else is not)."""
    return isinstance(location, str) and location.startswith(f"{SCHEME}://")


def redacted(text: str) -> str:
    """A URL as an error may show it: whatever precedes an '@' after the scheme (user:secret) replaced by ***."""
    scheme, sep, rest = text.partition("://")
    return f"{scheme}{sep}***@{rest.rpartition('@')[2]}" if sep and "@" in rest else text


def parse(url: str) -> ObjectLocation:
    """`s3://bucket/prefix` checked: a valid bucket name, no credentials, port, query or fragment, and a prefix of
    plain segments (no empty, '.' or '..' segment, no control character or backslash); InvalidLocation otherwise
    (naming the location without what credentials it held)."""
    parts, url = urlsplit(url), redacted(url)
    if parts.scheme != SCHEME or "@" in parts.netloc or ":" in parts.netloc or parts.query or parts.fragment:
        raise InvalidLocation(url, "expected s3://bucket/prefix (no credentials, port, query or fragment)")
    if not BUCKET.fullmatch(parts.netloc) or ".." in parts.netloc:
        raise InvalidLocation(url, f"{parts.netloc!r} is not an S3 bucket name")
    prefix = parts.path.strip("/")
    segments = prefix.split("/") if prefix else []
    if any(s in ("", ".", "..") for s in segments) or _UNSAFE.search(prefix):
        raise InvalidLocation(url, "the prefix must be plain segments (no empty, '.' or '..' part, no control bytes)")
    if len(prefix.encode()) > MAX_KEY_BYTES:
        raise InvalidLocation(url, f"the prefix is longer than {MAX_KEY_BYTES} bytes")
    return ObjectLocation(parts.netloc, prefix)


def endpoint(given: str = "", region_given: str = "") -> str:
    """The endpoint `given` (IOOptions.endpoint), else AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL, checked (scheme and
    host only), else AWS's own for the region."""
    named = given or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if not named:
        return f"https://s3.{region(region_given)}.amazonaws.com"
    return checked_endpoint(named)


def checked_endpoint(named: str) -> str:
    """An endpoint as http(s)://host[:port] (no credentials, path or query); InvalidLocation naming it else."""
    parts, named = urlsplit(named.strip()), redacted(named)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.username or parts.password:
        raise InvalidLocation(named, "the endpoint must be http(s)://host[:port], without credentials")
    if parts.path.strip("/") or parts.query or parts.fragment:
        raise InvalidLocation(named, "the endpoint must not have a path or query")
    try:
        parts.port  # noqa: B018  (raises ValueError for a port out of range)
    except ValueError as e:
        raise InvalidLocation(named, str(e)) from None
    return f"{parts.scheme}://{parts.netloc}"


def region(given: str = "") -> str:
    """The region `given` (IOOptions.region), else AWS_REGION or AWS_DEFAULT_REGION, else us-east-1 (what signing
    names; radosgw accepts any)."""
    return given or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
