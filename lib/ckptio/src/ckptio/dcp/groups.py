"""Background saves never share the caller's process group, and never overlap each other.

`dcp.async_save` runs `dcp.save` on a background thread whose planning and commit collectives
(gather_object, scatter_object, broadcast_object) go to the caller's group unless the caller passes
another. A training loop's own collectives on the main thread (a barrier, an all_reduce of gradients)
then interleave with them on one gloo group in a different order on each rank, and both hang. So:

- on the first async save (in `Writer.stage`, which DCP calls on the caller's thread on every rank in
  the same order) the Writer makes a gloo group of its own over the whole world, once per default group;
- when DCP then drives the Writer from a thread other than the main one with the default group (the
  caller passed no `process_group`), the save's collectives are pointed at that group. DCP offers no
  hook for it: `_save_state_dict` keeps its `_DistWrapper` in a local named `distW`, which
  `set_up_storage_writer` reaches through the caller frames before the save's first collective. A caller's
  explicit group is left alone; a torch whose saver no longer has `distW` gets a warning with the fix
  (pass `process_group=writer.process_group` to `dcp.async_save`).
- a save waits for the previous save driven by the same Writer to end (its thread to exit), so two saves'
  collectives and commits never interleave, even when the caller starts the next before awaiting one.
"""

from __future__ import annotations

import sys
import threading
import warnings
from types import FrameType
from typing import Any

FRAMES = 12  # how far up set_up_storage_writer looks for DCP's saver frame


def world() -> Any:
    """The default process group when one with more than one rank is initialised, else None."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return None
    return dist.distributed_c10d._get_default_group()


def own_group(local: dict[str, Any]) -> Any:
    """This Writer's gloo group over the world (made on first use, again if the default group changed);
    None without a multi-rank default group. Collective: every rank calls it at the same point."""
    import torch.distributed as dist

    default = world()
    if default is None:
        return None
    if local.get("group_of") is not default:
        local.update(group=dist.new_group(backend="gloo"), group_of=default)
    return local["group"]


def redirect(group: Any) -> None:
    """Point the DCP save that is calling us, if it uses the caller's default group, at `group`."""
    import torch.distributed as dist
    from torch.distributed.checkpoint.utils import _DistWrapper

    frame: FrameType | None = sys._getframe(1)
    for _ in range(FRAMES):
        if frame is None:
            break
        wrapper = frame.f_locals.get("distW")
        if isinstance(wrapper, _DistWrapper):
            if wrapper.group is None and wrapper.use_dist:
                wrapper.group = group
                wrapper.global_coordinator_rank = dist.get_global_rank(group, wrapper.coordinator_rank)
            return
        frame = frame.f_back
    warnings.warn(
        "ckptio Writer: cannot find DCP's save to give it the Writer's own process group; an async save "
        "may deadlock against main-thread collectives: pass process_group=writer.process_group",
        RuntimeWarning,
        stacklevel=3,
    )


EXECUTOR_THREAD = "AsyncCheckpointExecutor"  # DCP's thread executor names its one worker so; it exits after the save


def after_previous(local: dict[str, Any]) -> None:
    """Wait until the previous async save through this Writer has ended (its DCP executor thread exited);
    note this save's thread."""
    previous = local.get("save_thread")
    current = threading.current_thread()
    if isinstance(previous, threading.Thread) and previous is not current and _executor(previous):
        previous.join()
    local["save_thread"] = current


def off_main_thread() -> bool:
    """Whether DCP drives this save from a background thread (async_save's executor)."""
    return threading.current_thread() is not threading.main_thread()


def _executor(thread: threading.Thread) -> bool:
    """A thread of DCP's async executor (it ends with its save), not one of the caller's."""
    return thread.name.startswith(EXECUTOR_THREAD)
