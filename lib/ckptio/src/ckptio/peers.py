"""The exchanges of a peer tier over torch.distributed, on a gloo process group of the tier's own: rank r's copy is
held by the rank with its local index on each of the next `replicas` nodes (a ring of nodes; "node" as the
launcher says: LOCAL_WORLD_SIZE ranks each), and every exchange is a ring permutation every rank takes part in,
with or without a copy of its own (a header says which), so no rank waits for a message that never comes. A copy
is received to a temp name, verified against its checksums, renamed into place only then, and acknowledged; no
rank ever keeps, or loads, a torn or unverified copy. Only tensors cross the wire (no pickle)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from .errors import CheckpointError, OptionError, PeerError
from .options import local_ranks

CHUNK_BYTES = 16 << 20  # one message of a copy
WINDOW = 4  # messages of a copy in flight each way (rotating buffers): read, or written, while the others travel
COLLECTIVE_FAILED = "a collective of the peer tier failed"
CHUNK_SECONDS = 15.0  # the longest one message may take (about 1 MiB/s): longer, the peer is taken as gone
LISTED = 64  # the newest steps a listing carries per source
HEADER, DATA, ACK = 1, 2, 3  # message tags
#: What a holder answers for a copy it was sent.
KEPT, NOT_VERIFIED, NO_ROOM, NOT_WRITTEN, NOTHING_SENT = range(5)
ANSWERS = {
    NOT_VERIFIED: "the copy it received does not verify",
    NO_ROOM: "the copy does not fit in its memory",
    NOT_WRITTEN: "it could not write the copy",
    NOTHING_SENT: "nothing was sent",
}


@dataclass(frozen=True)
class Incoming:
    """Where a received copy goes: `open_temp(nbytes)` a new empty file (CheckpointError where there is no room),
    `keep(temp)` verifies and renames it into place (CheckpointError where it does not verify)."""

    open_temp: Callable[[int], str]
    keep: Callable[[str], None]


#: The Incoming of a copy of (source rank, step).
IncomingFor = Callable[[int, int], Incoming]


class Ring:
    """The ranks' ring of nodes, and the tier's own process group (made here: a collective call)."""

    def __init__(self, replicas: int, timeout_seconds: float) -> None:
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            raise OptionError("a peer tier needs torch.distributed initialised first (torchrun: init_process_group)")
        self.rank, self.world, self.per_node = dist.get_rank(), dist.get_world_size(), local_ranks()
        nodes, odd = divmod(self.world, self.per_node)
        if odd or nodes < replicas + 1:
            raise OptionError(
                f"a peer tier with {replicas} replica(s) needs at least {replicas + 1} nodes of equal size: this job "
                f"has {self.world} ranks, {self.per_node} per node (LOCAL_WORLD_SIZE)"
            )
        self.replicas, self.timeout_seconds = replicas, timeout_seconds
        self.refused = ""  # why the newest copy this rank received was not kept
        self._buffers: list[Any] = [_empty() for _ in range(2 * WINDOW)]
        self.group = dist.new_group(backend="gloo", timeout=timedelta(seconds=timeout_seconds))

    def holder(self, j: int) -> int:
        """The rank holding this rank's j-th replica (j from 1)."""
        return (self.rank + j * self.per_node) % self.world

    def source(self, j: int) -> int:
        """The rank whose j-th replica this rank holds."""
        return (self.rank - j * self.per_node) % self.world

    # -- saves ------------------------------------------------------------------------------------

    def replicate(self, j: int, path: str | None, step: int, incoming: IncomingFor) -> None:
        """Round j of a save: this rank's copy (the file `path`; None: none this time) to its holder, its source's
        copy kept through `incoming`; PeerError where the holder did not keep this rank's copy."""
        holder, source = self.holder(j), self.source(j)
        with failing(holder):
            self._replicate(holder, source, path, step, incoming)

    def _replicate(self, holder: int, source: int, path: str | None, step: int, incoming: IncomingFor) -> None:
        size = os.path.getsize(path) if path is not None else 0
        theirs = self._swap([step if path is not None else -1, size], holder, source, HEADER)
        their_step, their_size = int(theirs[0]), int(theirs[1])
        coming = incoming(source, their_step) if their_step >= 0 else None
        answer = self._move(path, size, holder, source, their_size, coming)
        said = int(self._swap([answer], source, holder, ACK)[0])
        if path is not None and said != KEPT:
            raise PeerError(holder, step, f"it did not keep this rank's copy: {ANSWERS.get(said, said)}")
        if path is None:
            raise PeerError(holder, step, "this rank had no verified copy to send")

    def _move(self, path: str | None, size: int, dst: int, src: int, their_size: int, incoming: Incoming | None) -> int:
        """Send `size` bytes of `path` to dst while receiving `their_size` from src into `incoming` (None: src sends
        nothing); what to answer src (KEPT once its copy is verified and in place)."""
        if incoming is None:
            self._stream(path, size, dst, None, 0, src)
            return NOTHING_SENT
        try:
            temp = incoming.open_temp(their_size)
        except CheckpointError as error:
            self._stream(path, size, dst, None, their_size, src)
            self.refused = str(error)
            return NO_ROOM
        try:
            with _written(temp) as sink:
                self._stream(path, size, dst, sink, their_size, src)
            incoming.keep(temp)
        except CheckpointError as error:
            self.refused = str(error)
            return NOT_VERIFIED
        except OSError as error:
            self.refused = str(error)
            return NOT_WRITTEN
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
        return KEPT

    def _stream(self, path: str | None, size: int, dst: int, sink: int | None, their_size: int, src: int) -> None:
        """`path`'s bytes to dst and src's copy into the descriptor `sink` (None: received and dropped), side by
        side, WINDOW messages in flight each way through rotating buffers: a message is read while the ones before
        it travel, and written while the ones after it arrive. A read that fails sends zeros for the rest (the
        holder's check refuses them); a write that fails drops the rest (every message is still received); either
        is raised after the exchange."""
        import torch.distributed as dist

        sending, coming = _chunks(size), _chunks(their_size)
        sends: list[Any] = []
        receives = [self._receive(k, coming, src) for k in range(min(WINDOW, len(coming)))]
        unread: OSError | None = None
        unwritten: OSError | None = None
        with _opened(path) as source:
            for k in range(max(len(sending), len(coming))):
                if k < len(sending):
                    if k >= WINDOW:
                        _wait(sends[k - WINDOW : k - WINDOW + 1], CHUNK_SECONDS)
                    at, end = sending[k]
                    out = self._buffer(k % WINDOW, CHUNK_BYTES)[: end - at]
                    unread = unread or _read(source, memoryview(out.numpy()), at)
                    sends.append(dist.isend(out, dst, group=self.group, tag=DATA))
                if k < len(coming):
                    _wait(receives[k : k + 1], CHUNK_SECONDS)
                    unwritten = unwritten or _write(sink, self._buffer(WINDOW + k % WINDOW, 0), coming[k])
                    if k + WINDOW < len(coming):
                        receives.append(self._receive(k + WINDOW, coming, src))
            _wait(sends[-WINDOW:], CHUNK_SECONDS)
        for failed in (unread, unwritten):
            if failed is not None:
                raise failed

    def _receive(self, k: int, coming: list[tuple[int, int]], src: int) -> Any:
        """Post the receive of message k of a copy into its rotating buffer."""
        import torch.distributed as dist

        at, end = coming[k]
        into = self._buffer(WINDOW + k % WINDOW, CHUNK_BYTES)[: end - at]
        return dist.irecv(into, src, group=self.group, tag=DATA)

    def _buffer(self, which: int, nbytes: int) -> Any:
        """Rotating buffer `which` (uint8 tensors: WINDOW to send, then WINDOW to receive), kept between exchanges
        and grown to `nbytes`: their pages are touched once, not at every copy."""
        import torch

        if self._buffers[which].numel() < nbytes:
            self._buffers[which] = torch.empty(nbytes, dtype=torch.uint8)
        return self._buffers[which]

    # -- restores ---------------------------------------------------------------------------------

    def listing(self, held: Callable[[int], list[int]]) -> list[int]:
        """The steps this rank's holders hold of its copies (newest LISTED per replica), from every rank's
        `held(source)`: a collective call."""
        import torch
        import torch.distributed as dist

        mine = torch.full((self.replicas, LISTED), -1, dtype=torch.int64)
        for j in range(1, self.replicas + 1):
            steps = sorted(held(self.source(j)), reverse=True)[:LISTED]
            mine[j - 1, : len(steps)] = torch.tensor(steps, dtype=torch.int64)
        table = [torch.empty_like(mine) for _ in range(self.world)]
        with failing(self.rank, COLLECTIVE_FAILED):
            dist.all_gather(table, mine, group=self.group)
        found = {int(s) for j in range(1, self.replicas + 1) for s in table[self.holder(j)][j - 1] if s >= 0}
        return sorted(found)

    def fetch(self, j: int, step: int, wanted: bool, held_path: str | None, incoming: Incoming) -> str | None:
        """Round j of a restore: this rank asks its j-th holder for its copy of `step` (`wanted`), and sends its
        source its held copy (`held_path`) where the source asks; None once a verified copy came in, else why not."""
        import torch
        import torch.distributed as dist

        wants = [torch.zeros(1, dtype=torch.int64) for _ in range(self.world)]
        mine = torch.tensor([1 if wanted else 0], dtype=torch.int64)
        with failing(self.rank, COLLECTIVE_FAILED):
            dist.all_gather(wants, mine, group=self.group)
        holder, source = self.holder(j), self.source(j)
        with failing(holder if wanted else source):
            return self._fetch(holder, source, bool(wants[source][0]), wanted, step, held_path, incoming)

    def _fetch(
        self, holder: int, source: int, asked: bool, wanted: bool, step: int, held_path: str | None, incoming: Incoming
    ) -> str | None:
        import torch
        import torch.distributed as dist

        size = os.path.getsize(held_path) if asked and held_path is not None else 0
        sending = asked and held_path is not None
        ops = []
        if asked:
            ops.append(dist.isend(torch.tensor([step if sending else -1, size]), source, group=self.group, tag=HEADER))
        header = torch.zeros(2, dtype=torch.int64)
        if wanted:
            ops.append(dist.irecv(header, holder, group=self.group, tag=HEADER))
        _wait(ops, self.timeout_seconds)
        coming = wanted and int(header[0]) == step
        path = held_path if sending else None
        answer = self._move(path, size, source, holder, int(header[1]) if coming else 0, incoming if coming else None)
        if answer == KEPT:
            return None
        return self.refused if answer != NOTHING_SENT else f"rank {holder} holds no copy of step {step}"

    def agree(self, candidates: list[int]) -> int | None:
        """The newest step every rank lists among its `candidates` (None where there is none): a collective call."""
        import torch
        import torch.distributed as dist

        mine = torch.full((LISTED,), -1, dtype=torch.int64)
        newest = sorted(set(candidates), reverse=True)[:LISTED]
        mine[: len(newest)] = torch.tensor(newest, dtype=torch.int64)
        table = [torch.empty_like(mine) for _ in range(self.world)]
        with failing(self.rank, COLLECTIVE_FAILED):
            dist.all_gather(table, mine, group=self.group)
        common = set.intersection(*({int(s) for s in row if s >= 0} for row in table))
        return max(common) if common else None

    def worst(self, code: int) -> int:
        """The largest of every rank's `code`: a collective call."""
        import torch
        import torch.distributed as dist

        flag = torch.tensor([code], dtype=torch.int64)
        with failing(self.rank, COLLECTIVE_FAILED):
            dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self.group)
        return int(flag[0])

    def _swap(self, values: list[int], dst: int, src: int, tag: int) -> Any:
        """Send `values` to dst while receiving as many from src."""
        import torch
        import torch.distributed as dist

        out = torch.tensor(values, dtype=torch.int64)
        into = torch.zeros(len(values), dtype=torch.int64)
        work = [dist.isend(out, dst, group=self.group, tag=tag), dist.irecv(into, src, group=self.group, tag=tag)]
        _wait(work, self.timeout_seconds)
        return into


@contextlib.contextmanager
def _opened(path: str | None) -> Iterator[int | None]:
    """A descriptor of `path` (None: no file) for the block."""
    if path is None:
        yield None
        return
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)


def _chunks(nbytes: int) -> list[tuple[int, int]]:
    """The (start, end) of each message of a copy of `nbytes`."""
    return [(at, min(at + CHUNK_BYTES, nbytes)) for at in range(0, nbytes, CHUNK_BYTES)]


def _empty() -> Any:
    """A buffer not grown yet."""
    import torch

    return torch.empty(0, dtype=torch.uint8)


@contextlib.contextmanager
def _written(temp: str) -> Iterator[int]:
    """A descriptor writing `temp`, for the block."""
    fd = os.open(temp, os.O_WRONLY | os.O_CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)


def _write(sink: int | None, buffer: Any, where: tuple[int, int]) -> OSError | None:
    """Write the received message `where` (start, end) from `buffer` into `sink` at its offset (None: dropped);
    the error where the write fails or falls short."""
    if sink is None:
        return None
    at, end = where
    try:
        done = os.pwritev(sink, [memoryview(buffer.numpy())[: end - at]], at)
        if done != end - at:
            raise OSError(f"the copy's write ended at {at + done} bytes")
    except OSError as error:
        return error
    return None


def _read(fd: int | None, into: memoryview, offset: int) -> OSError | None:
    """Fill `into` from `fd` at `offset`; zeros and the error where the read fails or ends early."""
    try:
        assert fd is not None
        done = os.preadv(fd, [into], offset)
        if done != len(into):
            raise OSError(f"the copy ended at {offset + done} bytes while sent")
    except OSError as error:
        into[:] = bytes(len(into))
        return error
    return None


def _wait(work: list[Any], seconds: float) -> None:
    """Wait for point-to-point work, at most `seconds` each (gloo waits for ever on a send whose peer died midway
    without a limit; a timeout closes the pair). Called inside `failing`, which names the peer."""
    limit = timedelta(seconds=seconds)
    for w in work:
        w.wait(limit)


@contextlib.contextmanager
def failing(peer: int, what: str = "the exchange failed") -> Iterator[None]:
    """torch.distributed's errors in the block (a peer gone: gloo's "Connection closed by peer", a timeout; also
    raised when a message is posted to a peer already gone) as PeerError naming `peer` and `what` failed."""
    try:
        yield
    except RuntimeError as error:
        raise PeerError(peer, None, f"{what}: {error}") from error
