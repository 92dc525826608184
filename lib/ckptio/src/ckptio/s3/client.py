"""Requests to one bucket through the AWS CRT's S3 client (awscrt, the extra `ckptio[s3]`).

Path-style requests (`/<bucket>/<key>`: AWS, radosgw and MinIO all take them), SigV4-signed with the
environment's credentials. Nothing a store does can hold a caller past its limits: a connect timeout; every
request (a part, a ranged GET, a listing page) cancelled once it has taken `request_seconds`; every request
of an operation (`within`) refused once the operation's deadline passed; a transient failure (a 5xx, SlowDown,
a reset) retried `retries` times with capped exponential back-off and jitter (the CRT's standard strategy; a
4xx never); a listing of at most MAX_PAGES pages, each at most MAX_LISTING bytes, a page token that repeats
refused; XML with a DOCTYPE (entities) refused unparsed. An upload above `part_size` is a multipart upload of
parallel parts (the CRT aborts it when a part fails); a ranged GET above `part_size` is split into parallel
ranged GETs. Every failure is an ObjectStoreError: the request, the key, the HTTP status, the tries.
"""

from __future__ import annotations

import contextlib
import copy
import io
import re
import threading
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from ..errors import BackendUnavailable, ObjectStoreError
from . import location as locations

CONNECT_TIMEOUT_MS = 5000
#: A request (one part of an upload, one ranged GET) is retried this often on a transient failure (a 5xx, SlowDown, a
#: reset connection) before the save or load fails: S3's own advice for a library; the benchmark's client retries none.
RETRIES = 2
REQUEST_SECONDS = 120  # the most one request may take, sent to its last byte (IOOptions.request_seconds)
BACKOFF_MS, MAX_BACKOFF_S = 200, 5  # a retry waits up to 200 ms x 2^attempt (full jitter), never over 5 s
CANCEL_WAIT_S = 10  # how long a cancelled request may take to let go of its buffers
MAX_LISTING = 16 << 20  # a listing page of 1,000 keys is ~300 KB
MAX_PAGES = 10_000  # a listing of up to 10 million keys; a store that pages on forever is refused
MAX_ERROR_BODY = 64 << 10
#: The CRT's names for a throttling answer whose status it does not pass on.
THROTTLED = {"AWS_ERROR_S3_SLOW_DOWN": 503}  # how much of an error's body is searched for S3's code
_NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"
_CODE = re.compile(rb"<Code>([^<]{1,100})</Code>")


@dataclass(frozen=True)
class Stored:
    """An object as a listing or HEAD tells it: size, ETag and when it was last written (the store's clock)."""

    key: str
    size: int
    etag: str
    modified: datetime | None


@dataclass(frozen=True)
class Upload:
    """A multipart upload begun and neither completed nor aborted."""

    key: str
    upload_id: str
    initiated: datetime | None


def _crt() -> Any:
    """The awscrt package, or BackendUnavailable naming the extra that brings it."""
    try:
        import awscrt.s3
    except ImportError:
        raise BackendUnavailable("s3", "s3:// locations need the AWS CRT: pip install 'ckptio[s3]'") from None
    return awscrt


class Segments(io.RawIOBase):
    """A read-only, seekable stream over (offset, bytes) segments of an object of `size` bytes (gaps read as
    zeros): an upload's body read straight from the memory that holds it."""

    def __init__(self, segments: list[tuple[int, memoryview]], size: int) -> None:
        super().__init__()
        self.segments = sorted(((o, v) for o, v in segments if len(v)), key=lambda s: s[0])
        self.size, self.at, self._next = size, 0, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        out = memoryview(buffer).cast("B")
        count = min(len(out), self.size - self.at)
        done = 0
        while done < count:
            done += self._copy(out[done:count], self.at + done)
        self.at += count
        return count

    def _copy(self, out: memoryview, at: int) -> int:
        """Fill the start of `out` with the object's bytes from `at`; how many were filled."""
        while self._next < len(self.segments) and sum(self._span(self._next)) <= at:
            self._next += 1
        if self._next == len(self.segments) or self.segments[self._next][0] > at:
            gap = self.segments[self._next][0] - at if self._next < len(self.segments) else len(out)
            n = min(len(out), gap)
            out[:n] = bytes(n)
            return n
        start, data = self.segments[self._next]
        n = min(len(out), start + len(data) - at)
        out[:n] = data[at - start : at - start + n]
        return n

    def _span(self, i: int) -> tuple[int, int]:
        return self.segments[i][0], len(self.segments[i][1])

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.at, io.SEEK_END: self.size}[whence]
        self.at, self._next = max(0, min(self.size, base + offset)), 0
        return self.at

    def tell(self) -> int:
        return self.at


class _Into:
    """A ranged GET's body copied into a buffer at each chunk's offset (the CRT gives offsets in the object, the
    range starting at `start`); bytes past the buffer's end are counted, not kept."""

    def __init__(self, into: memoryview, start: int) -> None:
        self.into, self.start, self.received, self.overflow = into, start, 0, False
        self.lock = threading.Lock()

    def __call__(self, chunk: Any, offset: int, **_: Any) -> None:
        size = len(chunk)
        with self.lock:
            self.received += size
        at = offset - self.start
        if at >= 0 and at + size <= len(self.into):
            self.into[at : at + size] = chunk
        else:
            self.overflow = True


class _Collect:
    """A small response body (a listing, an error), kept up to MAX_LISTING bytes."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.received = 0

    def __call__(self, chunk: Any, offset: int, **_: Any) -> None:
        self.received += len(chunk)
        if self.received <= MAX_LISTING:
            self.parts.append(bytes(chunk))


class Bucket:
    """Blocking requests to one bucket (thread-safe: call from many threads, or start several with `begin`), each
    bounded in time and retries; `within(seconds)` gives the same client with an operation's deadline."""

    def __init__(
        self,
        bucket: str,
        part_size: int = 16 << 20,
        connections: int | None = None,
        retries: int = RETRIES,
        request_seconds: float = REQUEST_SECONDS,
        endpoint: str = "",
        region: str = "",
    ) -> None:
        crt = _crt()
        from awscrt import auth, s3
        from awscrt import io as crt_io

        self._s3, self.bucket = s3, bucket
        url = locations.endpoint(endpoint, region)
        self.host = urlsplit(url).netloc
        loops = crt_io.EventLoopGroup()
        tls = s3.S3RequestTlsMode.ENABLED if url.startswith("https:") else s3.S3RequestTlsMode.DISABLED
        credentials = auth.AwsCredentialsProvider.new_environment()  # AWS_* variables only, never ~/.aws
        region = self.region = locations.region(region)
        self.client = s3.S3Client(
            bootstrap=crt_io.ClientBootstrap(loops, crt_io.DefaultHostResolver(loops)),
            region=region,
            tls_mode=tls,
            signing_config=s3.create_default_s3_signing_config(region=region, credential_provider=credentials),
            part_size=part_size,
            multipart_upload_threshold=part_size,
            max_active_connections_override=connections,
            retry_config=retry_config(s3, retries),
            connect_timeout_ms=CONNECT_TIMEOUT_MS,
        )
        self._errors = crt.exceptions.AwsCrtError
        self.retries, self.request_seconds = retries, request_seconds
        self.deadline: float | None = None  # time.monotonic() past which no request of the operation is sent
        self.budget = 0.0  # the operation's seconds, for messages

    def within(self, seconds: float) -> Bucket:
        """This client for one operation that may take at most `seconds` in all (its requests, its retries)."""
        bound = copy.copy(self)
        bound.deadline, bound.budget = time.monotonic() + seconds, seconds
        return bound

    def url(self, key: str) -> str:
        """How a key is named in errors."""
        return f"s3://{self.bucket}/{key}"

    def put(self, key: str, body: io.RawIOBase, size: int) -> None:
        """PutObject of `size` bytes read from `body` (a multipart upload of parallel parts above part_size)."""
        self._wait("PutObject", key, self._start("PutObject", "PUT", key, body=body, size=size))

    def put_file(self, key: str, path: str) -> None:
        """PutObject of a local file, read by the CRT itself in parallel parts (no copy through Python)."""
        import os

        size = os.stat(path).st_size
        self._wait("PutObject", key, self._start("PutObject", "PUT", key, size=size, send_filepath=path))

    def get(self, key: str, start: int, into: memoryview, if_match: str | None = None) -> int:
        """GetObject of the bytes [start, start + len(into)) into `into`; how many arrived (fewer at the end).
        With `if_match` (an ETag), only from that version of the object (else HTTP 412)."""
        return self.finish_get(key, self.begin_get(key, start, into, if_match))

    def begin_get(self, key: str, start: int, into: memoryview, if_match: str | None = None) -> tuple[Any, _Into]:
        """Start a ranged GetObject into `into` (of the version `if_match` names, if given); pass the result to
        `finish_get`."""
        sink = _Into(into, start)
        headers = [("Range", f"bytes={start}-{start + len(into) - 1}")] + ([("If-Match", if_match)] if if_match else [])
        return self._start("GetObject", "GET", key, sink=sink, headers=headers), sink

    def finish_get(self, key: str, started: tuple[Any, _Into]) -> int:
        """Wait for a GET `begin_get` started; the bytes received (ObjectStoreError if more came than asked)."""
        request, sink = started
        self._wait("GetObject", key, request)
        if sink.overflow:
            raise ObjectStoreError(self.url(key), "GetObject", None, f"{sink.received} bytes, more than asked")
        return sink.received

    def read(self, key: str, limit: int) -> bytes:
        """A whole small object (a checkpoint's metadata), refused when larger than `limit` bytes."""
        into = memoryview(bytearray(limit + 1))
        got = self.get(key, 0, into)
        if got > limit:
            raise ObjectStoreError(self.url(key), "GetObject", None, f"larger than {limit} bytes")
        return bytes(into[:got])

    def head(self, key: str) -> Stored | None:
        """HeadObject: the object's size and ETag, None when there is none (404)."""
        found: dict[str, str] = {}

        def seen(status_code: int, headers: Any, **_: Any) -> None:
            found.update((k.lower(), v) for k, v in headers)

        try:
            self._wait("HeadObject", key, self._start("HeadObject", "HEAD", key, on_headers=seen))
        except ObjectStoreError as e:
            if e.status == 404:
                return None
            raise
        return Stored(key, int(found.get("content-length", "0")), found.get("etag", ""), _when(found))

    def create(self, region: str = "us-east-1") -> bool:
        """CreateBucket (in `region`: AWS wants it named outside us-east-1) unless HeadBucket finds it there: False
        then (or on 409 BucketAlreadyOwnedByYou); ObjectStoreError otherwise (409 BucketAlreadyExists: another
        account's, 403 a bucket we may not use)."""
        try:
            self._wait("HeadBucket", "", self._start("HeadBucket", "HEAD", ""))
            return False
        except ObjectStoreError as e:
            if e.status != 404:
                raise
        body = b""
        if region != "us-east-1":
            body = (
                b'<CreateBucketConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><LocationConstraint>'
                + region.encode()
                + b"</LocationConstraint></CreateBucketConfiguration>"
            )
        try:
            self._wait(
                "CreateBucket", "", self._start("CreateBucket", "PUT", "", body=io.BytesIO(body), size=len(body))
            )
        except ObjectStoreError as e:
            if e.status == 409 and "BucketAlreadyOwnedByYou" in str(e):
                return False
            raise
        return True

    def delete(self, key: str) -> None:
        """DeleteObject (a missing object is no error: S3 answers 204 either way)."""
        self._wait("DeleteObject", key, self._start("DeleteObject", "DELETE", key))

    def listing(self, prefix: str) -> list[Stored]:
        """Every object whose key starts with `prefix` (ListObjectsV2, page by page)."""
        found: list[Stored] = []
        token: str | None = None
        seen: set[str] = set()
        for _ in range(MAX_PAGES):
            query = {"list-type": "2", "prefix": prefix} | ({"continuation-token": token} if token else {})
            entries, token = parse_listing(self._xml("ListObjectsV2", query))
            found += entries
            if token is None:
                return found
            _new_page(token, seen, self.url(prefix), "ListObjectsV2")
        raise ObjectStoreError(self.url(prefix), "ListObjectsV2", None, f"a listing of more than {MAX_PAGES} pages")

    def uploads(self, prefix: str) -> list[Upload]:
        """Multipart uploads begun under `prefix` and neither completed nor aborted (ListMultipartUploads)."""
        found: list[Upload] = []
        marker: dict[str, str] = {}
        seen: set[str] = set()
        for _ in range(MAX_PAGES):
            root = self._xml("ListMultipartUploads", {"uploads": "", "prefix": prefix} | marker)
            for e in _children(root, "Upload"):
                found.append(Upload(_text(e, "Key"), _text(e, "UploadId"), _iso(_find(e, "Initiated"))))
            if _find(root, "IsTruncated").lower() != "true":
                return found
            marker = {"key-marker": _find(root, "NextKeyMarker"), "upload-id-marker": _find(root, "NextUploadIdMarker")}
            _new_page(repr(sorted(marker.items())), seen, self.url(prefix), "ListMultipartUploads")
        raise ObjectStoreError(self.url(prefix), "ListMultipartUploads", None, f"more than {MAX_PAGES} pages")

    def abort(self, upload: Upload) -> None:
        """AbortMultipartUpload (one already gone is no error)."""
        query = {"uploadId": upload.upload_id}
        try:
            self._wait(
                "AbortMultipartUpload",
                upload.key,
                self._start("AbortMultipartUpload", "DELETE", upload.key, query=query),
            )
        except ObjectStoreError as e:
            if e.status != 404:
                raise

    def _xml(self, operation: str, query: dict[str, str]) -> ElementTree.Element:
        """A bucket-level GET whose answer is an XML document, parsed (ObjectStoreError if it is not one)."""
        body = _Collect()
        self._wait(operation, "", self._start(operation, "GET", "", query=query, sink=body))
        if body.received > MAX_LISTING:
            raise ObjectStoreError(self.url(""), operation, None, f"an answer of {body.received} bytes")
        return parse_xml(b"".join(body.parts), self.url(""), operation)

    def _start(
        self,
        operation: str,
        method: str,
        key: str,
        *,
        body: io.RawIOBase | io.BytesIO | None = None,
        size: int | None = None,
        query: dict[str, str] | None = None,
        sink: Callable[..., None] | None = None,
        headers: list[tuple[str, str]] | None = None,
        send_filepath: str | None = None,
        on_headers: Callable[..., None] | None = None,
    ) -> Any:
        """Send one request; its future."""
        from awscrt.http import HttpHeaders, HttpRequest

        path = f"/{self.bucket}" + (f"/{quote(key, safe='/')}" if key else "")
        path += f"?{urlencode(query)}" if query else ""
        sent = HttpHeaders([("Host", self.host), *(headers or [])])
        if size is not None:
            sent.add("Content-Length", str(size))
        kinds = {"PutObject": self._s3.S3RequestType.PUT_OBJECT, "GetObject": self._s3.S3RequestType.GET_OBJECT}
        kind = kinds.get(operation, self._s3.S3RequestType.DEFAULT)
        named = {} if operation in kinds else {"operation_name": operation}
        request = HttpRequest(method, path, sent, body)
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise ObjectStoreError(self.url(key), operation, None, self._out_of_time())
        try:
            return self.client.make_request(
                type=kind, request=request, on_body=sink, on_headers=on_headers, send_filepath=send_filepath, **named
            )
        except self._errors as e:
            raise ObjectStoreError(self.url(key), operation, None, f"{e.name} ({e.message})") from None

    def _wait(self, operation: str, key: str, request: Any) -> None:
        """Wait for a request, at most request_seconds and never past the operation's deadline (then it is cancelled);
        ObjectStoreError with the HTTP status, S3's error code and the tries if it failed."""
        limit = self.request_seconds
        if self.deadline is not None:
            limit = min(limit, max(0.0, self.deadline - time.monotonic()))
        try:
            request.finished_future.result(timeout=limit)
        except self._errors as e:
            status = getattr(e, "status_code", None) or THROTTLED.get(e.name)
            transient = status is None or status >= 500
            tries = f" (after up to {self.retries + 1} tries)" if self.retries and transient else ""
            raise ObjectStoreError(self.url(key), operation, status, _reason(e) + tries) from None
        except TimeoutError:
            request.cancel()
            with contextlib.suppress(Exception):  # the CRT ends a cancelled request with an error: expected
                request.finished_future.result(timeout=CANCEL_WAIT_S)
            why = (
                self._out_of_time()
                if limit < self.request_seconds
                else (f"no whole answer within {self.request_seconds:g} s (IOOptions.request_seconds): cancelled")
            )
            raise ObjectStoreError(self.url(key), operation, None, why) from None

    def _out_of_time(self) -> str:
        return f"the operation's {self.budget:g} s (IOOptions.operation_seconds) ran out: cancelled"

    def close(self) -> None:
        """Let the CRT client go (its connections close with it)."""
        self.client = None


def retry_config(s3: Any, retries: int) -> Any:
    """The CRT's retry strategy: `retries` per request with capped back-off, or none at all (its 0 means 5)."""
    if not retries:
        return s3.S3RetryConfig(retry_mode=s3.S3RetryMode.NONE)
    return s3.S3RetryConfig(
        retry_mode=s3.S3RetryMode.STANDARD,
        max_retries=retries,
        backoff_scale_factor_ms=BACKOFF_MS,
        max_backoff_secs=MAX_BACKOFF_S,
    )


def parse_xml(data: bytes, where: str, operation: str) -> ElementTree.Element:
    """An answer's XML document; ObjectStoreError for one that is not XML, or that declares a DOCTYPE (S3 never
    does: entities are never expanded)."""
    if b"<!DOCTYPE" in data[:4096].upper() or b"<!ENTITY" in data.upper():
        raise ObjectStoreError(where, operation, None, "an XML answer with a DOCTYPE or entities: refused unparsed")
    try:
        return ElementTree.fromstring(data)
    except ElementTree.ParseError as e:
        raise ObjectStoreError(where, operation, None, f"not an XML answer ({e})") from None


def parse_listing(root: ElementTree.Element) -> tuple[list[Stored], str | None]:
    """One ListObjectsV2 page: its entries and the next page's token (None on the last page); ObjectStoreError
    for an entry or a page it cannot read."""
    return [_stored(e) for e in _children(root, "Contents")], _next_token(root, "NextContinuationToken")


def _new_page(token: str, seen: set[str], where: str, operation: str) -> None:
    """A listing's next page token, refused when the store gave it before (it would page on forever)."""
    if token in seen:
        raise ObjectStoreError(where, operation, None, "a listing whose page token repeats")
    seen.add(token)


def _reason(error: Any) -> str:
    """What a failed request said: S3's error code where it answered, else the CRT's error."""
    code = _CODE.search((getattr(error, "body", None) or b"")[:MAX_ERROR_BODY])
    if code:
        return code.group(1).decode("ascii", "replace")
    return f"{error.name} ({error.message})"


def _when(headers: dict[str, str]) -> datetime | None:
    """Last-Modified of a HEAD answer."""
    try:
        return parsedate_to_datetime(headers["last-modified"])
    except (KeyError, TypeError, ValueError):
        return None


def _iso(text: str) -> datetime | None:
    """An ISO 8601 time of a listing, None when it cannot be read."""
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def _stored(e: ElementTree.Element) -> Stored:
    """One <Contents> entry of a listing."""
    try:
        size = int(_text(e, "Size"))
    except ValueError:
        size = -1
    if not 0 <= size < 1 << 63:
        raise ObjectStoreError("listing", "ListObjectsV2", None, "an entry with a size that is not a byte count")
    return Stored(_text(e, "Key"), size, _find(e, "ETag"), _iso(_find(e, "LastModified")))


def _children(root: ElementTree.Element, tag: str) -> Iterator[ElementTree.Element]:
    """The elements named `tag` directly under root, with or without S3's namespace."""
    yield from root.findall(f"{_NS}{tag}")
    yield from root.findall(tag)


def _find(element: ElementTree.Element, tag: str) -> str:
    """A child's text ('' when missing)."""
    return element.findtext(f"{_NS}{tag}") or element.findtext(tag) or ""


def _text(element: ElementTree.Element, tag: str) -> str:
    """A child's text that must be there."""
    found = _find(element, tag)
    if not found:
        raise ObjectStoreError("listing", "List", None, f"an entry without {tag}")
    return found


def _next_token(root: ElementTree.Element, tag: str) -> str | None:
    """The continuation token of a truncated listing, None on its last page."""
    if _find(root, "IsTruncated").lower() != "true":
        return None
    token = _find(root, tag)
    if not token:
        raise ObjectStoreError("listing", "ListObjectsV2", None, "a truncated listing without a continuation token")
    return token
