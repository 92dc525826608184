"""radosgw 16.2's empty ETag, accepted narrowly while an s3torchconnector save runs.

radosgw 16.2.15 answers every CompleteMultipartUpload with an empty `<ETag></ETag>` (its log shows the ETag it
computed; it does not send it), and s3torchconnectorclient 1.5 (mountpoint-s3-client 0.14, where every put_object is
a multipart upload) then fails the upload with `Header "ETag" not found`, though the object is stored whole. No
s3torchconnector, S3ClientConfig or radosgw option avoids it. Inside `accepted()`, and only there, S3Writer.close
lets that one error pass once a HEAD of the object shows the bytes written (the HEAD is timed with the save); any
other error, a HEAD that fails or another size is raised. s3torchconnector's own code paths are kept otherwise.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from gdsbench.errors import ToolError

#: What mountpoint-s3-client says of a CompleteMultipartUpload answered with an empty ETag.
ETAG_MISSING = 'Header "ETag" not found'


class StoredSizeMismatch(ToolError):
    """An upload that failed on its ETag, and whose object does not hold the bytes written (or cannot be seen)."""


class EmptyEtag:
    """radosgw's empty ETags accepted and counted, each only after a HEAD of its object shows the bytes written."""

    def __init__(self, region: str, endpoint: str) -> None:
        from s3torchconnectorclient._mountpoint_s3_client import MountpointS3Client

        self.head = MountpointS3Client(region=region, endpoint=endpoint, force_path_style=True, max_attempts=1)
        self.count = 0
        self._lock = threading.Lock()

    def accept(self, error: Exception, bucket: str, key: str, written: int) -> None:
        """Return when `error` is the empty-ETag failure and bucket/key holds `written` bytes; raise otherwise."""
        from s3torchconnectorclient import S3Exception

        if ETAG_MISSING not in str(error):
            raise error
        try:
            stored = self.head.head_object(bucket, key).size
        except S3Exception as exc:
            raise StoredSizeMismatch(f"s3://{bucket}/{key}: {error}, and its HEAD failed: {exc}") from error
        if stored != written:
            raise StoredSizeMismatch(
                f"s3://{bucket}/{key}: {error}, and the object holds {stored} bytes, not the {written} written"
            ) from error
        with self._lock:
            self.count += 1

    def note(self) -> str | None:
        """What the row says of the workaround, when it fired."""
        if not self.count:
            return None
        times = "time" if self.count == 1 else "times"
        return f"radosgw sent an empty ETag {self.count} {times}; each object's size checked by HEAD (timed)"


@contextlib.contextmanager
def accepted(region: str, endpoint: str) -> Iterator[EmptyEtag]:
    """S3Writer.close accepting radosgw's empty ETag (EmptyEtag.accept) inside the block; the original after it."""
    from s3torchconnector import s3writer
    from s3torchconnectorclient import S3Exception

    etag = EmptyEtag(region, endpoint)
    original = s3writer.S3Writer.close

    def close(writer: Any) -> None:
        try:
            original(writer)
        except S3Exception as error:
            etag.accept(error, writer.stream.bucket, writer.stream.key, writer.tell())

    s3writer.S3Writer.close = close  # type: ignore[method-assign]
    try:
        yield etag
    finally:
        s3writer.S3Writer.close = original  # type: ignore[method-assign]
