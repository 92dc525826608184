"""The four calls most users need, as small as torch.save / torch.load: each owns its staging buffers
for the length of the call. For repeated saves and loads of one path, keep a Checkpointer instead."""

from __future__ import annotations

import os
from typing import Any, TypeVar

from .loading import device_of, load_existing, load_mapped, load_new
from .memory import StagingCache
from .options import IOOptions, resolve
from .saving import save_to

T = TypeVar("T")


def save(
    state_dict: Any, path: str | os.PathLike[str], *, options: IOOptions | None = None, checksum: str | None = "xxh3"
) -> None:
    """Save a (nested) state dict durably, in a file torch.load(weights_only=True) can read.

    The file is written under a temporary name in the same directory, fsynced, renamed over `path`
    and the directory fsynced: a crash never leaves a torn file at `path` nor harms the previous one.
    An `s3://bucket/prefix/name.ckpt` path (ckptio[s3]) gets the same bytes as one object, uploaded in
    parallel parts: it appears whole or not at all, and replaces the previous one atomically.

    Args:
        state_dict: nested dicts/lists/tuples of tensors (any dtype and device, views, shared
            storages) and plain Python values (int, float, str, bool, None, ...).
        path: destination file or `s3://` object; replaced atomically if it exists.
        options: how to move the bytes (threads, staging memory, backend...); host defaults if None.
        checksum: "xxh3" (default), "crc32c", or None to record no data checksums.

    Raises:
        OptionError: options or checksum that cannot work.
        UnsupportedLocation: a URL of another scheme (`gs://...`).
        InvalidLocation: a malformed `s3://` location (bucket name, credentials, '..' segments).
        BackendUnavailable: options.backend="gds" (loads only); s3:// without ckptio[s3].
        OSError: the file system failed (ENOSPC, EACCES, ...); the previous file at `path` is intact.
        ObjectStoreError: the object store refused or failed (`status`: HTTP status); the previous
            object is intact.
        RuntimeError: from torch's pickler, e.g. two tensors viewing one storage with different dtypes.
    """
    options = resolve(options)
    with StagingCache() as cache:
        save_to(state_dict, path, options, checksum, cache.within(options.buffer_bytes, options.chunk_bytes))


def load(
    path: str | os.PathLike[str], *, map_location: Any = "cpu", options: IOOptions | None = None, verify: bool = True
) -> Any:
    """Load a checkpoint written by `save` into new memory, bit-exact, with storage sharing preserved.

    Args:
        path: the checkpoint file, or an `s3://` object (read by parallel ranged GETs of the version
            first found: an object replaced during the load fails it with HTTP 412).
        map_location: "cpu" (default) or a CUDA device. With options.backend "auto", a CUDA
            destination is read with GPUDirect Storage (kvikio) where it can run, else read to host
            memory and copied; "gds" insists on GPUDirect Storage. The path taken is logged on the
            `ckptio` logger.
        options: how to move the bytes; host defaults if None.
        verify: check every chunk checksum and the pickle digest (default True), on every path.

    Returns:
        The saved object (dicts/lists/tuples of tensors and plain values).

    Raises:
        InvalidCheckpoint: not a ckptio checkpoint (or not a regular file: a directory, FIFO or
            device), a malformed index or zip directory, or a pickle weights_only unpickling refuses.
        UnsupportedLocation, InvalidLocation: as for `save`.
        TruncatedCheckpoint: the file is shorter than it says.
        CorruptCheckpoint: a checksum mismatch; names the tensor's key path and the file.
        BackendUnavailable: a CUDA map_location without CUDA, or gds asked for where it cannot run
            (a CPU destination, an object); s3:// without ckptio[s3].
        ObjectStoreError: a request failed (`status`: 404 for a missing object, 412 for one replaced
            during the load).
        OptionError: a bad map_location, or options.backend="gds" with a CPU destination.
    """
    device = device_of(map_location)
    with StagingCache() as cache:
        return load_new(path, device, resolve(options), verify, cache).obj


def load_into(
    path: str | os.PathLike[str],
    state_dict: T,
    *,
    options: IOOptions | None = None,
    verify: bool = True,
    strict: bool = True,
) -> T:
    """Fill the tensors of an existing state dict in place (as DCP loads do), and return it.

    Every tensor of `state_dict` must exist in the checkpoint under the same key path ("a.b.0.c"),
    with the same dtype and shape; it is filled on its own device (CPU tensors that own their whole
    storage are read straight into it where the device takes the address, else through reused staging
    buffers: no new memory). Plain values (step counters) are replaced where the containers are mutable.
    A load that fails (a corrupt chunk, a cut file) raises and leaves the tensors partly written.

    With `strict` (default), as `load_state_dict(strict=True)`: the checkpoint and `state_dict` must
    have the same key paths (a fresh optimizer's empty `state` against a checkpoint saved after a step
    is refused, naming the Adam moments it would lose), checked before anything is read or written.
    `strict=False` fills what both have and skips the rest (tensors the state dict does not ask for
    are not read).

    Raises:
        StateDictMismatch: a tensor missing from the checkpoint, of another dtype or shape, or on a
            device that cannot be filled; with `strict`, key paths only one side has; names them.
        and the errors of `load`.
    """
    with StagingCache() as cache:
        return load_existing(path, state_dict, resolve(options), verify, cache, strict).obj


def load_mmap(path: str | os.PathLike[str], *, options: IOOptions | None = None, verify: bool = True) -> Any:
    """Load a checkpoint as copy-on-write views of the file's page-cache pages, faulted in up front by
    options.threads readahead threads and verified: torch.load(mmap=True), but eager and parallel.

    Page-cache pages are filled by the device, not zeroed first as new memory is, which pays where
    first touch of fresh memory is slow (VMs). CPU only. The tensors are verified when loaded, then
    share the file's pages until written to: ckptio's saves (a rename of a new file) leave them as
    they are, but another writer changes them in place (every page the caller has not written to;
    after a truncation, as `cp` over the file does, every page), and an access past a truncated end
    kills the process with SIGBUS. Use `load` for tensors nothing outside the process can change.

    Raises:
        OptionError: options.backend other than "auto" or "buffered" (a mapping reads through the
            page cache); and the errors of `load`.
        UnsupportedLocation: any URL, `s3://` included (a mapping needs a file).
    """
    return load_mapped(path, resolve(options), verify).obj
