"""The places a TieredCheckpointer keeps its checkpoints: a local directory or an `s3://bucket/prefix`.

Each holds one ckptio single-file checkpoint per step, named `step-<step:012d>.ckpt` (a file in the directory,
an object `<prefix>/step-....ckpt`). A tier's contents are untrusted: only names of that pattern are listed,
read or removed (regular files of this user's in a directory; no link is followed), so nothing outside the
tier is ever read or removed; every copy is verified when loaded. A drain to an object store aborts, once its
upload completed, the incomplete uploads of checkpoint names listed before it began (s3/stale.py): a failed or
killed drain leaves no upload behind past the next one.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from . import durable
from .errors import OptionError
from .folder import resolved_folder
from .loading import load_existing, load_new
from .memory import StagingCache
from .options import IOOptions
from .places import place

if TYPE_CHECKING:
    import torch

    from .s3.client import Bucket
    from .s3.location import ObjectLocation

NAME = re.compile(r"step-(\d{12})\.ckpt")
MAX_STEP = 10**12 - 1
DEFAULT_KEEP = 2
COPY_BYTES = 64 << 20  # what one sendfile call moves


def name_of(step: int) -> str:
    """The checkpoint name of a step (OptionError for a step that has none)."""
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= MAX_STEP:
        raise OptionError(f"step must be an int from 0 to {MAX_STEP}, not {step!r}")
    return f"step-{step:012d}.ckpt"


def step_of(name: str) -> int | None:
    """The step a checkpoint name stands for, None for any other name."""
    found = NAME.fullmatch(name)
    return int(found.group(1)) if found else None


@contextlib.contextmanager
def pinned(path: str) -> Iterator[str]:
    """A name for the file at `path` as it is now (`/proc/self/fd/N`, not following a link, regular files only):
    what is read through it stays that file whatever is renamed over or removed at `path` meanwhile."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path}: not a regular file")
        yield f"/proc/self/fd/{fd}"
    finally:
        os.close(fd)


class LocalTier:
    """A local directory of checkpoints, ours alone (made, mode 0700, on the first save into it): one another user
    owns or can write, or reached through a link another user could have planted, is refused (UnsafeLocation),
    so no file in it can have been planted or swapped by anyone but this user (or root)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.path.abspath(os.fspath(path))

    def __str__(self) -> str:
        return self.path

    def file(self, step: int) -> str:
        """Where a step's checkpoint is."""
        return os.path.join(self.path, name_of(step))

    def prepare(self) -> None:
        """Make the folder (0700) if missing; UnsafeLocation where it, or a folder on the way, is not safe."""
        resolved_folder(self.path, create=True, alone=True)

    def steps(self) -> list[int]:
        """The steps of the checkpoint files here: regular files of this user's (no link followed) of ckptio's names
        only, in a folder that is ours alone (UnsafeLocation otherwise)."""
        resolved_folder(self.path, alone=True)
        me = os.geteuid()
        with os.scandir(self.path) as entries:
            found = [(step_of(e.name), e) for e in entries]
            return [
                step
                for step, e in found
                if step is not None and e.is_file(follow_symlinks=False) and e.stat(follow_symlinks=False).st_uid == me
            ]

    def put(self, source: str, step: int) -> None:
        """Copy the file `source` in as `step`: to a temp name, fsynced, renamed into place, directory fsynced."""
        self.prepare()
        with durable.replace_atomically(self.file(step)) as target, open(source, "rb") as src:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            out = os.open(target.path, flags, 0o644)
            try:
                size, done = os.fstat(src.fileno()).st_size, 0
                while done < size:
                    sent = os.sendfile(out, src.fileno(), done, min(COPY_BYTES, size - done))
                    if sent == 0:
                        raise OSError(f"{source}: ended at {done} of {size} bytes while copied")
                    done += sent
                os.fsync(out)
            finally:
                os.close(out)

    def remove(self, step: int) -> None:
        """Remove a step's file if it is a regular file of this user's (another user's is left alone)."""
        path = self.file(step)
        with contextlib.suppress(FileNotFoundError):
            info = os.lstat(path)
            if stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid():
                os.unlink(path)

    @contextlib.contextmanager
    def readable(self, step: int) -> Iterator[str]:
        """A name that reads a step's file as it is now, no link followed (errors name the file)."""
        path = self.file(step)
        with pinned(path) as held, _named(held, path):
            yield held

    def forget(self) -> None:
        """Nothing held between requests."""


class ObjectTier:
    """An `s3://bucket/prefix` of checkpoint objects, through one Bucket (the options' part size and connections) made
    on first use (and made anew after a failed request, so an endpoint that comes back, or is changed in the
    environment, is used again)."""

    def __init__(self, location: ObjectLocation, options: IOOptions) -> None:
        self.location, self.options = location, options
        self._lock = threading.Lock()
        self._bucket: Bucket | None = None
        self.bucket()  # BackendUnavailable (no awscrt) or InvalidLocation (a bad endpoint) here, not in a drain

    def __str__(self) -> str:
        return str(self.location)

    def bucket(self) -> Bucket:
        """The tier's Bucket (made on first use)."""
        from .s3.transfer import bucket_for

        with self._lock:
            if self._bucket is None:
                self._bucket = bucket_for(self.location.bucket, self.options)
            assert self._bucket is not None
            return self._bucket

    def url(self, step: int) -> str:
        """A step's object as an s3:// URL."""
        return str(self.location.child(name_of(step)))

    def steps(self) -> list[int]:
        """The steps of the checkpoint objects directly under the prefix (ckptio's names only)."""
        bucket = self.bucket().within(self.options.operation_seconds)
        found = [self._step(s.key) for s in bucket.listing(self.location.key("step-"))]
        return [step for step in found if step is not None]

    def put(self, source: str, step: int) -> None:
        """Upload the file `source` as `step`'s object (one PUT, or a multipart upload: visible only when whole);
        then abort the incomplete uploads of checkpoint names listed before it began (a failed or killed drain's)."""
        from .s3.stale import abort_earlier, earlier_uploads

        bucket = self.bucket().within(self.options.operation_seconds)
        earlier = earlier_uploads(bucket, self.location.key("step-"), lambda key: self._step(key) is not None)
        bucket.put_file(self.location.key(name_of(step)), source)
        abort_earlier(bucket, earlier)

    def _step(self, key: str) -> int | None:
        """The step of a checkpoint's key directly under the prefix, None for any other key."""
        head = self.location.key("")
        return step_of(key[len(head) :]) if key.startswith(head) else None

    def remove(self, step: int) -> None:
        """Delete a step's object."""
        self.bucket().within(self.options.operation_seconds).delete(self.location.key(name_of(step)))

    @contextlib.contextmanager
    def readable(self, step: int) -> Iterator[str]:
        """A step's object as a URL (a load pins the version it first finds)."""
        yield self.url(step)

    def forget(self) -> None:
        """Drop the Bucket (after a failure): the next request makes a new one."""
        with self._lock:
            held, self._bucket = self._bucket, None
        if held is not None:
            held.close()


@contextlib.contextmanager
def _named(held: str, path: str) -> Iterator[None]:
    """Errors raised while reading `held` (a /proc/self/fd name) name `path` instead."""
    try:
        yield
    except Exception as error:
        if held in str(error):
            error.args = tuple(a.replace(held, path) if isinstance(a, str) else a for a in error.args)
            if isinstance(getattr(error, "path", None), str):
                error.path = path  # type: ignore[attr-defined]
        raise


Tier = LocalTier | ObjectTier


def _listed(tiers: Sequence[str | os.PathLike[str]]) -> list[str | os.PathLike[str]]:
    """The tiers as a list (a lone location is refused: it would be read as a list of characters)."""
    if isinstance(tiers, (str, bytes, os.PathLike)):
        raise OptionError(f"tiers must be a list of locations, nearest first, not {tiers!r}")
    return list(tiers)


def places(tiers: Sequence[str | os.PathLike[str]], options: IOOptions) -> list[Tier]:
    """The tier objects, each the tier of the place its location names (places/): tier 0 one that a save writes
    from training memory and the drains read back (local files), the later ones any place, all distinct."""
    tiers = _listed(tiers)
    if not tiers:
        raise OptionError("tiers must name at least one location (tier 0: a local directory)")
    made = [place(t) for t in tiers]
    if not made[0].traits.from_memory:
        raise OptionError(
            f"tier 0 must be a place a save writes from training memory and its drains read back (a local "
            f"directory), not {os.fspath(tiers[0])!r}"
        )
    places: list[Tier] = [where.tier(options) for where in made]
    names = [str(p) for p in places]
    if len(set(names)) != len(names):
        raise OptionError(f"tiers must be distinct locations: {names}")
    return places


def keep_counts(keep: int | Sequence[int] | None, n: int) -> list[int]:
    """`keep` as one count per tier, each at least 1."""
    counts = [DEFAULT_KEEP] * n if keep is None else [keep] * n if isinstance(keep, int) else list(keep)
    if len(counts) != n or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in counts):
        raise OptionError(f"keep must be a count of at least 1, or one per tier ({n}), not {keep!r}")
    return counts


def load(tier: Tier, step: int, device: torch.device, options: IOOptions, cache: StagingCache) -> Any:
    """Load and verify a tier's copy of a step into new memory on `device`."""
    with tier.readable(step) as name:
        return load_new(name, device, options, True, cache).obj


def load_into(tier: Tier, step: int, state_dict: Any, options: IOOptions, cache: StagingCache) -> Any:
    """Fill `state_dict` (strict) from a tier's copy of a step, verified; returns it."""
    with tier.readable(step) as name:
        return load_existing(name, state_dict, options, True, cache).obj
