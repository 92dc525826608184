"""One S3 bucket through the AWS CRT (`awscrt.s3.S3Client`, chosen by measurement: results/sample/s3-clients/).

Path-style requests (`/<bucket>/<key>`, as radosgw, MinIO and AWS all take them), SigV4 signed with credentials
read from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (/ AWS_SESSION_TOKEN) only, retries off: one call is one
logical request (a multipart upload or ranged parallel GET inside it, `part_size` apart), timed by the caller,
and a failure is an S3RequestError naming the operation, the key and what the server or the CRT said.
"""

from __future__ import annotations

import io
import re
import threading
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterator
from typing import Any, NamedTuple
from urllib.parse import quote, urlencode, urlsplit

from gdsbench.errors import ToolError

#: The most bytes a listing or error response may hold (a LIST page of 1,000 keys is ~300 KB).
MAX_RESPONSE = 16 << 20
#: S3's rules for a bucket name (3-63 characters: a shorter one is refused with InvalidBucketName).
BUCKET_NAME = re.compile(r"(?!\d+\.\d+\.\d+\.\d+$)[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_S3_NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"
_CODE = re.compile(rb"<Code>([^<]{1,100})</Code>")


class S3RequestError(ToolError):
    """An S3 request that failed: `operation key: what went wrong` (HTTP status and S3 code, or the CRT's error);
    `status` is the HTTP status where the service answered."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def endpoint_url(value: Any) -> str:
    """An endpoint such as http://127.0.0.1:7480 or https://s3.example.com: scheme and host only, no credentials."""
    if not isinstance(value, str):
        raise ValueError("not a string")
    parts = urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("not an http:// or https:// URL")
    if parts.username or parts.password:
        raise ValueError("holds credentials (they come from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY only)")
    if parts.path.strip("/") or parts.query or parts.fragment:
        raise ValueError("has a path or query (the bucket is its own key)")
    parts.port  # noqa: B018  (raises ValueError for a port out of range)
    return f"{parts.scheme}://{parts.netloc}"


def bucket_name(value: Any) -> str:
    """A bucket name by S3's rules: 3-63 lowercase letters, digits, '.' or '-', starting and ending alphanumeric."""
    if not isinstance(value, str) or not BUCKET_NAME.fullmatch(value) or ".." in value:
        raise ValueError("not an S3 bucket name")
    return value


class _View(io.RawIOBase):
    """A read-only stream over a memoryview, so a PUT body is read from the caller's buffer without a copy."""

    def __init__(self, view: memoryview) -> None:
        super().__init__()
        self.view, self.at = view, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        count = min(len(buffer), len(self.view) - self.at)
        memoryview(buffer).cast("B")[:count] = self.view[self.at : self.at + count]
        self.at += count
        return count

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.at, io.SEEK_END: len(self.view)}[whence]
        self.at = max(0, min(len(self.view), base + offset))
        return self.at

    def tell(self) -> int:
        return self.at


class _Sink:
    """A GET's body copied into the caller's buffer at each chunk's offset; what did not fit is counted."""

    def __init__(self, into: memoryview | None) -> None:
        self.into, self.received, self.overflow = into, 0, False
        self.chunks: list[bytes] = []
        self.lock = threading.Lock()

    def __call__(self, chunk: Any, offset: int, **_: Any) -> None:
        size = len(chunk)
        with self.lock:
            self.received += size
            if self.into is None:
                if self.received <= MAX_RESPONSE:
                    self.chunks.append(bytes(chunk))
            elif offset + size <= len(self.into):
                self.into[offset : offset + size] = chunk
            else:
                self.overflow = True


class Bucket:
    """Requests to one bucket of one endpoint, each a blocking call (call from many threads for concurrency)."""

    def __init__(self, endpoint: str, name: str, region: str, part_size: int) -> None:
        from awscrt import auth, s3
        from awscrt import io as crt_io

        self.s3, self.name, self.host = s3, name, urlsplit(endpoint).netloc
        self.url = f"{endpoint}/{name}"
        loops = crt_io.EventLoopGroup()
        tls = s3.S3RequestTlsMode.ENABLED if endpoint.startswith("https:") else s3.S3RequestTlsMode.DISABLED
        credentials = auth.AwsCredentialsProvider.new_environment()  # AWS_* variables only, never a file
        self.client = s3.S3Client(
            bootstrap=crt_io.ClientBootstrap(loops, crt_io.DefaultHostResolver(loops)),
            region=region,
            tls_mode=tls,
            signing_config=s3.create_default_s3_signing_config(region=region, credential_provider=credentials),
            part_size=part_size,
            multipart_upload_threshold=part_size,
            retry_config=s3.S3RetryConfig(retry_mode=s3.S3RetryMode.NONE),
        )

    def put(self, key: str, body: memoryview) -> None:
        """PutObject (a multipart upload above part_size)."""
        self._send("PutObject", "PUT", key, body=body)

    def get(self, key: str, into: memoryview) -> int:
        """GetObject into `into` (ranged parts in parallel above part_size); the bytes received. An object larger
        than `into` is an error."""
        sink = _Sink(into)
        self._send("GetObject", "GET", key, sink=sink)
        if sink.overflow:
            raise S3RequestError(f"GetObject {self.name}/{key}: {sink.received} bytes, more than {len(into)}")
        return sink.received

    def delete(self, key: str) -> None:
        """DeleteObject."""
        self._send("DeleteObject", "DELETE", key)

    def exists(self) -> bool:
        """HeadBucket: True when the bucket is there (and ours to use), False when it is not."""
        try:
            self._send("HeadBucket", "HEAD", "")
        except S3RequestError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def create(self) -> None:
        """CreateBucket."""
        self._send("CreateBucket", "PUT", "", body=memoryview(b""))

    def remove(self) -> None:
        """DeleteBucket (it must be empty)."""
        self._send("DeleteBucket", "DELETE", "")

    def sizes(self, prefix: str) -> dict[str, int]:
        """Every object under `prefix` and its size (ListObjectsV2, page by page)."""
        found: dict[str, int] = {}
        token: str | None = None
        while True:
            query = {"list-type": "2", "prefix": prefix, **({"continuation-token": token} if token else {})}
            sink = _Sink(None)
            self._send("ListObjectsV2", "GET", "", query=query, sink=sink)
            page = _listing(b"".join(sink.chunks), sink.received)
            found.update(page.sizes)
            if not page.next_token:
                return found
            token = page.next_token

    def uploads(self, prefix: str) -> list[Upload]:
        """The multipart uploads begun under `prefix` and neither completed nor aborted (ListMultipartUploads, its
        first 1,000: a run's own prefix holds a few)."""
        sink = _Sink(None)
        self._send("ListMultipartUploads", "GET", "", query={"uploads": "", "prefix": prefix}, sink=sink)
        if sink.received > MAX_RESPONSE:
            raise S3RequestError(f"ListMultipartUploads: a response of {sink.received} bytes")
        try:
            root = ElementTree.fromstring(b"".join(sink.chunks))
            return [Upload(_text(u, "Key"), _text(u, "UploadId")) for u in _children(root, "Upload")]
        except (ElementTree.ParseError, ValueError) as exc:
            raise S3RequestError(f"ListMultipartUploads: not a listing ({exc})") from None

    def abort(self, upload: Upload) -> None:
        """AbortMultipartUpload."""
        self._send("AbortMultipartUpload", "DELETE", upload.key, query={"uploadId": upload.upload_id})

    def _send(
        self,
        operation: str,
        method: str,
        key: str,
        *,
        body: memoryview | None = None,
        query: dict[str, str] | None = None,
        sink: _Sink | None = None,
    ) -> None:
        """One request, waited for; S3RequestError on any failure (never retried)."""
        from awscrt.exceptions import AwsCrtError
        from awscrt.http import HttpHeaders, HttpRequest

        path = f"/{self.name}" + (f"/{quote(key, safe='/')}" if key else "")
        path += f"?{urlencode(query)}" if query else ""
        headers = HttpHeaders([("Host", self.host)])
        if body is not None:
            headers.add("Content-Length", str(len(body)))
        kinds = {"PutObject": self.s3.S3RequestType.PUT_OBJECT, "GetObject": self.s3.S3RequestType.GET_OBJECT}
        kind = kinds.get(operation, self.s3.S3RequestType.DEFAULT)
        request = HttpRequest(method, path, headers, _View(body) if body is not None else None)
        named = {} if operation in kinds else {"operation_name": operation}
        try:
            made = self.client.make_request(type=kind, request=request, on_body=sink, **named)
            made.finished_future.result()
        except AwsCrtError as exc:
            status = getattr(exc, "status_code", None) or None
            raise S3RequestError(f"{operation} {self.name}/{key}: {_reason(exc)}", status) from None

    def close(self) -> None:
        """Let the CRT client go (its connections close with it)."""
        self.client = None


def _reason(exc: Any) -> str:
    """What a failed request's error says: HTTP status and S3 error code, else the CRT's error name."""
    status = getattr(exc, "status_code", None)
    if not status:
        return f"{exc.name} ({exc.message})"
    code = _CODE.search(getattr(exc, "body", None) or b"")
    return f"HTTP {status}" + (f" {code.group(1).decode('ascii', 'replace')}" if code else "")


class Upload(NamedTuple):
    """A multipart upload begun and neither completed nor aborted."""

    key: str
    upload_id: str


class _Page:
    """One ListObjectsV2 response: key -> size, and the token of the next page (None on the last)."""

    def __init__(self, sizes: dict[str, int], next_token: str | None) -> None:
        self.sizes, self.next_token = sizes, next_token


def _listing(document: bytes, received: int) -> _Page:
    """A ListObjectsV2 page parsed; S3RequestError for a response too large or not a listing."""
    if received > MAX_RESPONSE:
        raise S3RequestError(f"ListObjectsV2: a response of {received} bytes (at most {MAX_RESPONSE} expected)")
    try:
        root = ElementTree.fromstring(document)
        if root.tag not in (f"{_S3_NS}ListBucketResult", "ListBucketResult"):
            raise ValueError(f"a {root.tag[:60]} document")
        sizes = {_text(item, "Key"): int(_text(item, "Size")) for item in _children(root, "Contents")}
    except (ElementTree.ParseError, ValueError) as exc:
        raise S3RequestError(f"ListObjectsV2: not a listing ({exc})") from None
    truncated = (root.findtext(f"{_S3_NS}IsTruncated") or root.findtext("IsTruncated") or "").lower() == "true"
    token = root.findtext(f"{_S3_NS}NextContinuationToken") or root.findtext("NextContinuationToken")
    if truncated and not token:
        raise S3RequestError("ListObjectsV2: a truncated listing without a continuation token")
    return _Page(sizes, token if truncated else None)


def _children(root: ElementTree.Element, tag: str) -> Iterator[ElementTree.Element]:
    """The elements named `tag` directly under root, with or without S3's namespace."""
    yield from root.findall(f"{_S3_NS}{tag}")
    yield from root.findall(tag)


def _text(element: ElementTree.Element, tag: str) -> str:
    """A child's text; ValueError when it is missing."""
    found = element.findtext(f"{_S3_NS}{tag}") or element.findtext(tag)
    if found is None:
        raise ValueError(f"an entry without {tag}")
    return found
