"""deepspeed: DeepSpeed's FastFileWriter (the FastPersist writer) under torch.save, from its aio
handle's page-locked buffer (new_cpu_locked_tensor: pin_memory() fails on a CPU-only torch); loads read
the file with the same handle into a locked buffer, then torch.load from memory. Needs deepspeed and
its async_io op (libaio); skipped with the reason otherwise.

On the CPU accelerator DeepSpeed's FastFileWriter cannot load its `utils` op (the accelerator maps it
to a builder that refuses); gdsbench then points it at DeepSpeed's own generic builder of that op,
and every row measured that way says so in its note: the measurement is of a patched DeepSpeed.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gdsbench import workloads
from gdsbench.cases import Case, Pattern, Transfer
from gdsbench.runners.base import RunContext
from gdsbench.runners.checkpoint.base import TORCH, InProcessRunner, Package
from gdsbench.runners.checkpoint.fastpersist import odirect_reason

PATCH_NOTE = (
    "DeepSpeed patched by gdsbench: FastFileWriter's utils op from DeepSpeed's generic builder (CPU accelerator)"
)


class DeepSpeed(InProcessRunner):
    """DeepSpeed's FastFileWriter under torch.save, from page-locked buffers of its aio handle."""

    name = "deepspeed"
    description = "DeepSpeed FastFileWriter (torch.save through libaio O_DIRECT) / aio read + torch.load"
    calls = {
        Pattern.SAVE: "torch.save(deepspeed.io.FastFileWriter)",
        Pattern.LOAD: "deepspeed aio sync_pread + torch.load(weights_only=True)",
    }
    transfers = frozenset({Transfer.CPU_ONLY})
    packages = (TORCH, Package("deepspeed", "pip install deepspeed"))
    modules = ("torch", "deepspeed.io", "deepspeed.ops.op_builder")
    threaded = True
    block_bytes = 8 << 20
    queue_depth = 32
    buffer_bytes = 64 << 20  # FastFileWriter's locked staging buffer (double-buffered: halves alternate)
    alignment = 4096

    def __init__(self) -> None:
        self._aio: dict[int, tuple[Any, Any]] = {}  # threads -> (aio handle, locked staging buffer)
        self._read_buffer: tuple[Any, Any] | None = None  # (aio handle, locked buffer) of the last load

    def release(self) -> None:
        """Free the locked read buffer and every handle's locked staging buffer, drop the handles."""
        if self._read_buffer is not None:
            self._read_buffer[0].free_cpu_locked_tensor(self._read_buffer[1])
            self._read_buffer = None
        for aio, locked in self._aio.values():
            aio.free_cpu_locked_tensor(locked)
        self._aio.clear()
        super().release()

    def cannot_run(self, case: Case, ctx: RunContext) -> str | None:
        """DeepSpeed's async_io op must be buildable (libaio) and O_DIRECT must work in the directory."""
        try:
            from deepspeed.ops.op_builder import AsyncIOBuilder
        except ImportError as exc:
            return f"deepspeed not importable: {exc}"
        if not AsyncIOBuilder().is_compatible():
            return "DeepSpeed's async_io op cannot be built here (install libaio-dev)"
        return odirect_reason(str(ctx.directory))

    def handle(self, threads: int) -> tuple[Any, Any]:
        """An aio handle with `threads` I/O threads and its locked staging buffer, made once and reused."""
        if threads not in self._aio:
            import torch
            from deepspeed.ops.op_builder import AsyncIOBuilder

            aio = (
                AsyncIOBuilder()
                .load(verbose=False)
                .aio_handle(self.block_bytes, self.queue_depth, False, True, threads)
            )
            locked = aio.new_cpu_locked_tensor(self.buffer_bytes, torch.empty(0, dtype=torch.uint8))
            self._aio[threads] = (aio, locked)
        return self._aio[threads]

    @staticmethod
    def patch_utils_op() -> bool:
        """Point FastFileWriter at DeepSpeed's generic builder of its `utils` op where the CPU accelerator
        refuses it (the op is plain C++: flatten/unflatten); True when the patch was needed."""
        import deepspeed.io.fast_file_writer as fast_file_writer
        from deepspeed.ops.op_builder.cpu.no_impl import NotImplementedBuilder
        from deepspeed.ops.op_builder.utils import UtilsBuilder

        if fast_file_writer.UtilsBuilder is UtilsBuilder:
            return True
        if issubclass(fast_file_writer.UtilsBuilder, NotImplementedBuilder):
            fast_file_writer.UtilsBuilder = UtilsBuilder
            return True
        return False

    def save(self, staged: Any, path: Path, case: Case) -> str | None:
        """torch.save into a FastFileWriter (O_DIRECT through libaio; it fsyncs on close)."""
        import torch
        from deepspeed.io import FastFileWriter, FastFileWriterConfig

        patched = self.patch_utils_op()
        aio, locked = self.handle(case.get("threads"))
        config = FastFileWriterConfig(
            dnvme_handle=aio, pinned_tensor=locked, double_buffer=True, num_parallel_writers=1, writer_rank=0
        )
        writer = FastFileWriter(file_path=str(path), config=config)
        try:
            torch.save(dict(staged), writer)
        finally:
            writer.close()
        return PATCH_NOTE if patched else None

    def prepare(self, case: Case, workload: workloads.Workload, path: Path, ctx: RunContext) -> Any:
        """Loads get a locked read buffer the size of the file, kept and reused."""
        if case.pattern is Pattern.SAVE:
            return super().prepare(case, workload, path, ctx)
        import torch

        aio, _ = self.handle(case.get("threads"))
        size = path.stat().st_size
        if self._read_buffer is None or self._read_buffer[0] is not aio or self._read_buffer[1].numel() < size:
            if self._read_buffer is not None:
                self._read_buffer[0].free_cpu_locked_tensor(self._read_buffer[1])
            self._read_buffer = (aio, aio.new_cpu_locked_tensor(size, torch.empty(0, dtype=torch.uint8)))
        return self._read_buffer[1][:size]

    def load(self, path: Path, case: Case, staged: Any) -> Mapping[str, Any]:
        """Read the file with the aio handle into the locked buffer, then torch.load from memory.

        The aio op splits a read across its threads and wants whole pages per thread, so it reads the
        largest such prefix and the last few KiB come with one os.pread.
        """
        import torch

        threads = case.get("threads")
        aio, _ = self.handle(threads)
        size = staged.numel()
        head = size - size % (self.alignment * threads)
        if head and aio.sync_pread(staged[:head], str(path)) < 0:
            raise OSError(f"deepspeed aio read of {path} failed")
        with open(path, "rb", buffering=0) as f:
            f.seek(head)
            f.readinto(memoryview(staged[head:].numpy()))
        return torch.load(io.BytesIO(memoryview(staged.numpy())), map_location="cpu", weights_only=True)


ENGINE = DeepSpeed()
