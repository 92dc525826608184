"""The files a sweep keeps in its directory, and the guard before its first case: enough free space for
all of them, a directory that is not on the root file system unless the config says so, and enough memory for
its largest checkpoint case.

gdsio's per-thread files (`gdsio.<n>`), fio's per-job files (`gdsbench.<file_size>.<job>.0`) and every
checkpoint engine's checkpoint all live until the end of the sweep, so the sweep needs their sum at
once (configs/h100.yaml: 32 x 30 GiB for gdsio plus 32 x 30 GiB for fio, about 1.9 TiB). Files that
already exist count for what they already occupy. The check is statvfs on the directory, refusing with
the numbers; the mount check refuses a directory on `/` (an unmounted /mnt/nvme silently lands there)
unless `allow_root_filesystem: true`.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from gdsbench import runners
from gdsbench.cases import Case, Pattern
from gdsbench.errors import TargetError
from gdsbench.runners import fio_job, gdsio
from gdsbench.runners.base import RunContext
from gdsbench.runners.checkpoint.base import CheckpointRunner, workload_spec
from gdsbench.sysinfo import host, storage
from gdsbench.units import num2str, size_label

#: Checkpoint formats add headers, indexes and 4 KiB alignment to the tensors' bytes.
CHECKPOINT_OVERHEAD = 1.01
CHECKPOINT_SLACK = 1 << 20


@dataclass(frozen=True)
class FileSet:
    """Files of one engine that live in the directory: `count` files of `each` bytes (transient: only during a case)."""

    engine: str
    paths: tuple[Path, ...]
    each: int
    transient: bool = False

    @property
    def label(self) -> str:
        """A short description: 'gdsio 32 x 30G'."""
        return f"{self.engine} {len(self.paths)} x {size_label(self.each)}" + (" (per case)" if self.transient else "")

    def missing_bytes(self) -> int:
        """Bytes still to be allocated: each file's size minus what it already occupies on disk."""
        return sum(max(0, self.each - allocated(p)) for p in self.paths)


def human(num_bytes: int) -> str:
    """Bytes as people read them: 1920GiB, 63.9MiB."""
    return num2str(num_bytes, unit="B")


def allocated(path: Path) -> int:
    """Bytes a file occupies on disk (its allocated blocks), 0 when it does not exist."""
    try:
        return os.stat(path).st_blocks * 512
    except FileNotFoundError:
        return 0


def most_threads(cases: Iterable[Case], reads_only: bool = False) -> int:
    """The largest thread count among `cases` (only the reading ones with `reads_only`), 0 when none."""
    return max((c["threads"] for c in cases if not (reads_only and c.pattern.is_write)), default=0)


def gdsio_files(cases: list[Case], ctx: RunContext) -> list[FileSet]:
    """gdsio.0 .. gdsio.<most threads - 1>, shared by every gdsio case."""
    ours = [c for c in cases if c.engine == "gdsio"]
    threads = most_threads(ours)
    return [FileSet("gdsio", tuple(gdsio.data_files(ours[0], ctx, threads)), ctx.file_size)] if threads else []


def fio_files(cases: list[Case], ctx: RunContext) -> list[FileSet]:
    """fio's per-job files, reused across cases; `unlink` cases' files exist only while their case runs."""
    sets = []
    for unlink in (False, True):
        ours = [c for c in cases if c.engine == "fio" and bool(c["unlink"]) == unlink]
        if ours:
            widest = max(ours, key=lambda c: c["threads"])
            sets.append(FileSet("fio", tuple(fio_job.job_files(widest, ctx)), ctx.file_size, transient=unlink))
    return sets


def workload_bytes(case: Case, ctx: RunContext) -> int:
    """The bytes of a checkpoint case's state dict: its workload file's size, or the preset's."""
    spec = workload_spec(case, ctx)
    return Path(spec.source).stat().st_size if spec.is_file else spec.size


def checkpoint_files(cases: list[Case], ctx: RunContext) -> list[FileSet]:
    """One checkpoint per engine, workload, size, dtype and seed; a recycling one keeps a spare beside it."""
    found: dict[Path, int] = {}
    for case in cases:
        runner = runners.get(case.engine)
        if isinstance(runner, CheckpointRunner):
            size = workload_bytes(case, ctx)
            copies = 2 if case.get("recycle") else 1
            need = int(size * CHECKPOINT_OVERHEAD + CHECKPOINT_SLACK) * copies
            found[runner.path(case, ctx)] = max(found.get(runner.path(case, ctx), 0), need)
    return [FileSet(str(path.name), (path,), need) for path, need in found.items()]


def file_sets(cases: list[Case], ctx: RunContext) -> list[FileSet]:
    """Every file set the cases keep in the directory."""
    return [*gdsio_files(cases, ctx), *fio_files(cases, ctx), *checkpoint_files(cases, ctx)]


def need_bytes(sets: list[FileSet]) -> int:
    """Space still needed at once: every lasting set's missing bytes plus the largest per-case set."""
    lasting = sum(s.missing_bytes() for s in sets if not s.transient)
    return lasting + max((s.missing_bytes() for s in sets if s.transient), default=0)


def free_bytes(directory: Path) -> int:
    """Bytes an unprivileged writer can still allocate in `directory`'s file system (statvfs f_bavail)."""
    st = os.statvfs(directory)
    return st.f_bavail * st.f_frsize


def check_space(directory: Path, sets: list[FileSet]) -> None:
    """Refuse, with the numbers, a directory whose file system has less free space than the sweep's files need."""
    need, free = need_bytes(sets), free_bytes(directory)
    if need <= free:
        return
    where = mount_text(directory)
    parts = ", ".join(f"{s.label}: {human(s.missing_bytes())}" for s in sets if s.missing_bytes())
    raise TargetError(
        f"directory {directory} ({where}) has {human(free)} free ({free} bytes), but this sweep's files "
        f"need {human(need)} ({need} bytes) more: {parts}; free space or choose another `directory`"
    )


def mount_text(directory: Path) -> str:
    """The file system and device under `directory`: 'xfs on /dev/nvme0n1 mounted at /mnt/nvme'."""
    mount = storage.mount_of(directory)
    return f"{mount.get('fstype')} on {mount.get('device')} mounted at {mount.get('mount_point')}"


#: What a checkpoint case holds in memory at its peak: its state dict and, while a load runs, the copy it loads.
CHECKPOINT_MEMORY = 2.0


def memory_need(cases: list[Case], ctx: RunContext) -> tuple[int, Case | None]:
    """The memory the largest checkpoint case needs at its peak (CHECKPOINT_MEMORY x its workload), and that case."""
    most, which = 0, None
    for case in cases:
        if isinstance(runners.get(case.engine), CheckpointRunner):
            size = workload_bytes(case, ctx)
            if int(size * CHECKPOINT_MEMORY) > most:
                most, which = int(size * CHECKPOINT_MEMORY), case
    return most, which


def check_memory(cases: list[Case], ctx: RunContext) -> None:
    """Refuse, with the numbers, a sweep whose largest checkpoint case cannot fit in the memory available now."""
    need, case = memory_need(cases, ctx)
    available = host.meminfo("MemAvailable")
    if case is None or available is None or need <= available:
        return
    raise TargetError(
        f"the checkpoint case {case.key} holds its state dict and, loading, a second copy: about {human(need)} "
        f"({need} bytes) of memory, but this host has {human(available)} available (MemAvailable, "
        "/proc/meminfo): lower checkpoint_size, or free memory"
    )


def check_files(sets: list[FileSet]) -> None:
    """Refuse a test file's path that is a symbolic link or another user's: the tools would write through it."""
    for path in (p for s in sets for p in s.paths):
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(info.st_mode) or info.st_uid != os.geteuid():
            found = "a symbolic link" if stat.S_ISLNK(info.st_mode) else f"owned by uid {info.st_uid}"
            raise TargetError(
                f"{path} is {found}, not a test file of this user's (the tools would write through "
                "it): remove it, or choose another `directory`"
            )


def check_mount(directory: Path, allow_root: bool) -> None:
    """Refuse a directory on the root file system (where an unmounted /mnt/nvme lands) unless allowed."""
    mount = storage.mount_of(directory)
    if allow_root or mount.get("mount_point") != "/":
        return
    raise TargetError(
        f"directory {directory} is on the root file system ({mount.get('fstype')} on {mount.get('device')}), "
        "not on a mount of its own: mount the target disk there (check with `findmnt -T "
        f"{directory}`), or set `allow_root_filesystem: true` in the config to run there anyway"
    )


def reads(cases: Iterable[Case], engine: str) -> list[Case]:
    """The reading cases of an engine."""
    return [c for c in cases if c.engine == engine and c.pattern in (Pattern.READ, Pattern.RANDREAD)]
