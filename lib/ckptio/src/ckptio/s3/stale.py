"""Incomplete multipart uploads a failed or killed earlier save left, aborted by the next save of the same key.

A save lists the incomplete uploads of its key(s) before its own upload starts and, once that upload completed,
aborts them: they began before this save (no clocks compared). An abort that fails only warns (log "ckptio"):
the checkpoint is committed either way; a listing that fails warns too, but for a missing bucket, which fails the
save by itself. One saver per key: a concurrent save begun before this one
may find its upload aborted, and then fails by name (ObjectStoreError), the committed object staying.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ..errors import ObjectStoreError
from .client import Bucket, Upload

log = logging.getLogger("ckptio")


def earlier_uploads(bucket: Bucket, prefix: str, ours: Callable[[str], bool]) -> list[Upload]:
    """The incomplete uploads under `prefix` now whose key `ours` accepts ([] with a warning where they cannot be
    listed: the save goes on). A missing bucket (404) fails the save here, alone: its upload could not succeed."""
    try:
        return [u for u in bucket.uploads(prefix) if ours(u.key)]
    except ObjectStoreError as e:
        if e.status == 404:
            raise
        log.warning("%s: incomplete uploads of earlier saves not listed (none aborted): %s", bucket.url(prefix), e)
        return []


def abort_earlier(bucket: Bucket, uploads: list[Upload]) -> None:
    """Abort `uploads` (after this save's own upload completed); one that fails is logged, not raised."""
    for upload in uploads:
        try:
            bucket.abort(upload)
        except ObjectStoreError as e:
            log.warning("%s: an earlier save's incomplete upload not aborted: %s", bucket.url(upload.key), e)
