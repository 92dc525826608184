"""dcp_upload: the hand-rolled ladder the tiered engine is held to (issue 33), in the training loop of `pattern: train`.

Each checkpoint: torch.distributed.checkpoint.save in the sweep's process (no process group) with FileSystemWriter
(thread_count=threads, sync_files=True) into a new folder of a private folder in `directory`, the folder fsynced;
then, in a background thread, a PUT of each of its files (`.metadata` last, the commit) with the s3 engine's
client (runners/s3_client.py: the AWS CRT, `part_size` parts, no retries) to a fresh prefix of the case's
`bucket:`. The next checkpoint waits for the previous upload (the stall has the wait), then the local folder
before the previous one is removed. Rows carry the ladder's figures (ladder.py): durable_object_seconds runs from
the save's start to the last PUT; the object restore GETs the newest checkpoint's objects into a new folder (the
local copy removed first) and loads it from there. Every restore is verified against the workload.
"""

from __future__ import annotations

import mmap
import os
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gdsbench.cases import Case, Pattern, Transfer
from gdsbench.runners import s3
from gdsbench.runners.base import Measurement, RunContext
from gdsbench.runners.checkpoint import ladder, train
from gdsbench.runners.checkpoint.base import EXPECTED_ERRORS, TORCH, CheckpointRunner, Package, disk_bytes, timed
from gdsbench.runners.checkpoint.conditions import fsync_path, initialised_like, set_cache, verify
from gdsbench.runners.checkpoint.s3torch_dcp import one_process
from gdsbench.runners.s3_client import Bucket

S3_KEYS = ("endpoint", "bucket", "prefix", "region", "part_size", "rgw_gc")
_S3_OPTIONS = {key.name: key for key in s3.S3Runner.options}
COMMIT = ".metadata"  # DCP's metadata file: written last, uploaded last


@dataclass
class Saved:
    """One checkpoint of the loop: its step, when its save started, its seconds until durable locally and in S3."""

    step: int
    started: float
    local_seconds: float
    object_seconds: float | None = None


@dataclass(frozen=True)
class Place:
    """Where a run's checkpoints go: its private folder, and its bucket and fresh prefix."""

    folder: Path
    bucket: Bucket
    prefix: str


class DcpUpload(CheckpointRunner):
    """DCP to a local folder, then its files PUT to S3 behind the loop."""

    name = "dcp_upload"
    description = (
        "the hand-rolled ladder: DCP FileSystemWriter(thread_count=threads) to a local folder, then a PUT of its "
        "files to S3 behind the loop (the s3 engine's AWS CRT client)"
    )
    patterns = frozenset({Pattern.TRAIN})
    transfers = frozenset({Transfer.CPU_CACHED})
    packages = (TORCH, Package("awscrt", "pip install 'gdsbench[s3]'"))
    modules = ("torch", "torch.distributed.checkpoint")
    threaded = True
    extra_options = tuple(_S3_OPTIONS[name] for name in S3_KEYS)
    columns = (*CheckpointRunner.columns, *ladder.COLUMNS)

    def cannot_run(self, case: Case, ctx: RunContext) -> str | None:
        """No endpoint or credentials, or the Ceph tools rgw_gc needs."""
        return s3.access_missing(case) or s3.ceph_tools_missing(case)

    def call(self, case: Case) -> str:
        """The loop's calls, as --dry-run and the rows show them."""
        return (
            f"training loop: dcp.save(FileSystemWriter(thread_count={case['threads']})) then PutObject of its files "
            f"every {case['interval']} steps, then dcp.load(FileSystemReader) from the folder and from the objects"
        )

    def command(self, case: Case, ctx: RunContext) -> list[str]:
        """The shared checkpoint command, its location the folder and the prefix each run makes anew."""
        argv = super().command(case, ctx)
        where = f"{ctx.directory}/gdsbench-dcp-upload.*/ s3://{case['bucket']}/{case['prefix']}/{self.name}.*/"
        return [*argv[:2], where, *argv[3:], f"part_size={case['part_size']}", "retries=none"]

    def errors(self) -> tuple[type[BaseException], ...]:
        """DCP's CheckpointException (a BaseException wrapping what failed) and the engines' usual errors."""
        from torch.distributed.checkpoint import CheckpointException

        return (*EXPECTED_ERRORS, CheckpointException)

    def run(self, case: Case, ctx: RunContext) -> Measurement:
        """The loop, then a restore from the local folder and one from the objects."""
        workload = self.workload(case, ctx)
        keep = ctx.resources.keep_files
        with (
            ladder.private_folder(ctx.directory, "gdsbench-dcp-upload", keep) as folder,
            ladder.private_prefix(case, ctx, self.name) as (bucket, prefix),
        ):
            return self._measure(case, workload, Place(folder, bucket, prefix))

    def _measure(self, case: Case, workload: Any, place: Place) -> Measurement:
        """Train, checkpointing by hand; restore from each tier; the row."""
        step = train.Step(case["step_time"])
        saves: list[Saved] = []
        risk: list[int] = []
        with ThreadPoolExecutor(1, thread_name_prefix="gdsbench-upload") as uploads:

            def checkpoint() -> Future[None]:
                number = (len(saves) + 1) * case["interval"]
                risk.append(ladder.at_risk(number, [s.step for s in saves if s.object_seconds is not None]))
                saved = self._save_locally(workload.tensors, place.folder, number, case["threads"])
                saves.append(saved)
                return uploads.submit(_upload, place, saved)

            def loop() -> train.LoopTimes:
                return train.run_loop(step, case["steps"], case["interval"], checkpoint)

            times, _, usage = timed(self.name, self.errors(), loop)
        newest = place.folder / _name(saves[-1].step)
        files = sorted(newest.iterdir())
        cache_note = set_cache(files, case["cache"])
        local_seconds = self._restore(workload, newest)
        restore_seconds = local_seconds + ladder.step_seconds(step)
        figures = {
            "bytes_on_disk": disk_bytes(files),
            "durable_local_seconds": ladder.median(s.local_seconds for s in saves),
            "durable_object_seconds": ladder.median(s.object_seconds for s in saves if s.object_seconds is not None),
            "restore_local_seconds": local_seconds,
            "restore_object_seconds": self._restore_objects(workload, place, newest),
            "work_at_risk_steps": ladder.median(risk),
        }
        notes = [
            f"{len(times.stalls)} checkpoints in {len(times.steps)} steps",
            f"local restore from {cache_note}; object restore: GETs into a new folder, then dcp.load; both verified",
            workload.description,
        ]
        farthest = figures["durable_object_seconds"]
        return ladder.row(times, restore_seconds, farthest, figures, workload.nbytes, notes, usage)

    def _save_locally(self, tensors: Any, folder: Path, number: int, threads: int) -> Saved:
        """dcp.save into a new folder, files and folders fsynced; the local folder before the previous removed."""
        import torch.distributed.checkpoint as dcp

        started = time.perf_counter()
        directory = folder / _name(number)
        writer = dcp.FileSystemWriter(str(directory), thread_count=threads, sync_files=True)
        with one_process():
            dcp.save(dict(tensors), storage_writer=writer, no_dist=True)
        fsync_path(directory)
        fsync_path(folder)
        saved = Saved(number, started, time.perf_counter() - started)
        for old in sorted(p for p in folder.iterdir() if p.is_dir() and p.name < _name(number))[:-1]:
            ladder.remove_private(old)
        return saved

    def _restore(self, workload: Any, directory: Path) -> float:
        """dcp.load from a folder into zero-filled tensors, timed; verified against the workload."""
        import torch.distributed.checkpoint as dcp

        state = initialised_like(workload.tensors)

        def load() -> None:
            with one_process():
                dcp.load(state, storage_reader=dcp.FileSystemReader(str(directory)), no_dist=True)

        seconds = timed(self.name, self.errors(), load)[1]
        verify(workload.tensors, state, directory)
        return seconds

    def _restore_objects(self, workload: Any, place: Place, newest: Path) -> float:
        """The local copy removed, the newest checkpoint's objects fetched into a new folder and loaded, timed."""
        ladder.remove_private(newest)
        fetched = place.folder / f"fetched-{newest.name}"
        started = time.perf_counter()
        _download(place, newest.name, fetched)
        fetch_seconds = time.perf_counter() - started
        return fetch_seconds + self._restore(workload, fetched)


def _name(step: int) -> str:
    """A step's checkpoint folder (and object prefix)."""
    return f"step-{step:012d}"


def _upload(place: Place, saved: Saved) -> None:
    """PUT every file of a saved checkpoint, `.metadata` last; then it is durable in S3."""
    directory = place.folder / _name(saved.step)
    for path in sorted(directory.iterdir(), key=lambda p: (p.name == COMMIT, p.name)):
        _put_file(place.bucket, f"{place.prefix}/{directory.name}/{path.name}", path)
    saved.object_seconds = time.perf_counter() - saved.started


def _put_file(bucket: Bucket, key: str, path: Path) -> None:
    """PUT one file, read by the client from its mapping (no copy); an empty file as an empty body."""
    with open(path, "rb") as file:
        size = os.fstat(file.fileno()).st_size
        mapped = mmap.mmap(file.fileno(), size, access=mmap.ACCESS_READ) if size else b""
    bucket.put(key, memoryview(mapped))  # the mapping is closed when its last view goes


def _download(place: Place, name: str, into: Path) -> None:
    """GET every object of a checkpoint into files of a new folder, each fsynced."""
    into.mkdir(mode=0o700)
    for key, size in sorted(place.bucket.sizes(f"{place.prefix}/{name}/").items()):
        buffer = bytearray(size)
        place.bucket.get(key, memoryview(buffer))
        fd = os.open(into / key.rsplit("/", 1)[1], os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with open(fd, "wb") as file:
            file.write(buffer)
            file.flush()
            os.fsync(file.fileno())


ENGINE = DcpUpload()
