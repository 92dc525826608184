"""The guard before a sweep's first case: enough free space for every file its engines keep in the directory
(as each engine declares them: runners.file_sets), a directory that is not on the root file system unless the
config says so, and enough memory for its largest case (as its engine declares it).

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
from pathlib import Path

from gdsbench import runners
from gdsbench.cases import Case
from gdsbench.errors import TargetError
from gdsbench.runners.base import RunContext
from gdsbench.runners.file_sets import FileSet, HoldsMemory, KeepsFiles, human
from gdsbench.sysinfo import host, storage


def by_engine(cases: list[Case]) -> dict[str, list[Case]]:
    """The cases of each engine, in the order the config names them."""
    found: dict[str, list[Case]] = {}
    for case in cases:
        found.setdefault(case.engine, []).append(case)
    return found


def file_sets(cases: list[Case], ctx: RunContext) -> list[FileSet]:
    """Every file set the cases keep in the directory, as each engine declares them (KeepsFiles)."""
    sets: list[FileSet] = []
    for engine, ours in by_engine(cases).items():
        runner = runners.get(engine)
        if isinstance(runner, KeepsFiles):
            sets += runner.file_sets(ours, ctx)
    return sets


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


def memory_need(cases: list[Case], ctx: RunContext) -> tuple[int, Case | None]:
    """The memory the largest case needs at its peak, as its engine declares it (HoldsMemory), and that case."""
    most, which = 0, None
    for case in cases:
        runner = runners.get(case.engine)
        need = runner.memory_bytes(case, ctx) if isinstance(runner, HoldsMemory) else 0
        if need > most:
            most, which = need, case
    return most, which


def check_memory(cases: list[Case], ctx: RunContext) -> None:
    """Refuse, with the numbers, a sweep whose largest checkpoint case cannot fit in the memory available now."""
    need, case = memory_need(cases, ctx)
    available = host.meminfo("MemAvailable")
    if case is None or available is None or need <= available:
        return
    raise TargetError(
        f"the case {case.key} holds its state dict and, loading, a second copy: about {human(need)} "
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
