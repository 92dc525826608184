"""The checkpoint engines measured: one class per library, each only its save and its load.

- torch_save: torch.save into an open file (zip format, crc32 over every byte), then fsync;
  torch.load(weights_only=True) reads every record into fresh memory. Page cache (CPU_CACHED).
- fastpersist: ours, gdsbench.checkpoint.save/load through its public API: parallel positional
  writes/reads with `threads` workers, O_DIRECT for CPU_ONLY (a refused O_DIRECT fails the case
  rather than falling back silently), buffered for CPU_CACHED; loads verify their checksums.
  Options: recycle (saves overwrite the previous generation's blocks), load_into (loads fill
  existing tensors), mmap (loads map the file and fault it in with parallel readahead).
- safetensors: safetensors.torch.save_file, then fsync; load_file (0.8 returns lazy views of an
  mmap), then one byte of every page read so the bytes are really in memory. Page cache (CPU_CACHED).
- dcp: torch.distributed.checkpoint in one process (no_dist=True), FileSystemWriter with
  `threads` writer threads and sync_files=True (it fsyncs each file); the load reads in place into
  destination tensors allocated (untouched) before the measured call, as a model's parameters would be.
- kvikio: GPUDirect Storage through kvikio's CuFile: every tensor, already on the GPU, written at a
  4 KiB-aligned offset of one file (pwrite futures in parallel) with a JSON index beside it; loads
  pread into fresh CUDA tensors. Needs CUDA and kvikio; skipped with the reason otherwise.
- deepspeed: DeepSpeed's FastFileWriter (the FastPersist writer) under torch.save, from its aio
  handle's page-locked buffer (new_cpu_locked_tensor: pin_memory() fails on a CPU-only torch; on
  the CPU accelerator its `utils` op comes from DeepSpeed's generic builder, see _cpu_utils_op);
  loads read the file with the same handle into a locked buffer, then torch.load from memory.
  Needs deepspeed and its async_io op (libaio); skipped with the reason otherwise.
Every save is made durable by the runner (fsync of the files and the directory), see base.py.
"""

from __future__ import annotations

import functools
import importlib.util
import io
import json
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from gdsbench import sysinfo
from gdsbench.cases import Case, Pattern, Transfer
from gdsbench.keys import Key, boolean
from gdsbench.runners.base import RunContext
from gdsbench.runners.checkpoint.base import EXPECTED_ERRORS, OPTIONS, CheckpointRunner

PAGE = 4096


@functools.lru_cache(maxsize=8)
def odirect_reason(directory: str) -> str | None:
    """None when O_DIRECT opens work in `directory`, else why not (probed once per directory)."""
    works, why = sysinfo.odirect_works(Path(directory))
    return None if works else f"O_DIRECT does not work in {directory}: {why}"


class TorchSave(CheckpointRunner):
    """torch.save + fsync / torch.load(weights_only=True): the baseline every engine is compared to."""

    name = "torch_save"
    description = "torch.save into a file + fsync; torch.load(weights_only=True) (page cache)"
    calls = {Pattern.SAVE: "torch.save", Pattern.LOAD: "torch.load(weights_only=True)"}

    def save(self, state: Any, path: Path, case: Case) -> None:
        """torch.save into an open file (the runner fsyncs it)."""
        import torch

        with open(path, "wb") as f:
            torch.save(dict(state), f)

    def load(self, path: Path, case: Case, staged: Any) -> Mapping[str, Any]:
        """torch.load with weights_only semantics onto the CPU."""
        import torch

        return torch.load(path, map_location="cpu", weights_only=True)


class TorchMmap(TorchSave):
    """torch.load(mmap=True) of a torch.save file, every page touched: torch's own zero-copy load."""

    name = "torch_mmap"
    description = "torch.load(mmap=True, weights_only=True), every page touched (loads only; written by torch.save)"
    patterns = frozenset({Pattern.LOAD})
    calls = {Pattern.LOAD: "torch.load(mmap=True, weights_only=True)"}

    def load(self, path: Path, case: Case, staged: Any) -> Mapping[str, Any]:
        """torch.load over an mmap of the file; touching every page makes the reads happen inside the timing."""
        import torch

        tensors = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        touch_pages(tensors.values())
        return tensors


class FastPersist(CheckpointRunner):
    """gdsbench.checkpoint: the library this project builds, through its public save/load."""

    name = "fastpersist"
    description = "gdsbench.checkpoint save/load: parallel O_DIRECT (CPU_ONLY) or buffered (CPU_CACHED), checksummed"
    calls = {Pattern.SAVE: "gdsbench.checkpoint.save", Pattern.LOAD: "gdsbench.checkpoint.load(verify=True)"}
    transfers = frozenset({Transfer.CPU_ONLY, Transfer.CPU_CACHED})
    modules = ("torch", "gdsbench.checkpoint")
    threaded = True
    backends = {Transfer.CPU_ONLY: "direct", Transfer.CPU_CACHED: "buffered"}
    options = (
        *OPTIONS,
        Key(
            "load_into",
            boolean,
            "true or false",
            False,
            "load into existing, initialised tensors (load(into=...)) instead of new memory",
        ),
        Key(
            "recycle",
            boolean,
            "true or false",
            False,
            "save with recycle=True: overwrite the previous generation's blocks (the steady state of "
            "repeated saves to one path, reached by unmeasured saves first) instead of a new file",
        ),
        Key(
            "mmap",
            boolean,
            "true or false",
            False,
            "load with mmap=True: map the file and fault it in with parallel readahead (page cache, "
            "transfer CPU_CACHED) instead of reading into new memory",
        ),
    )

    @property
    def axes(self) -> frozenset[str]:
        """The shared checkpoint axes plus load_into, recycle and mmap."""
        return super().axes | {"load_into", "recycle", "mmap"}

    def path(self, case: Case, ctx: RunContext) -> Path:
        """Recycling saves keep their generations under their own name (a plain save to the same path
        would drop the spare they need)."""
        path = super().path(case, ctx)
        return path.with_suffix(".recycle" + path.suffix) if case.get("recycle") else path

    def replaces_in_place(self, case: Case) -> bool:
        """Recycling saves need the previous generations: the runner must not remove them."""
        return bool(case.get("recycle"))

    def prepare_save(self, state: Any, path: Path, case: Case, ctx: RunContext) -> None:
        """With recycle: save (unmeasured) until a spare generation exists, as from a training run's
        third save on; the spare is this sweep's file and removed with the rest."""
        if not case.get("recycle"):
            return
        spare = Path(durable_spare(path))
        ctx.track_new([spare])
        for _ in range(2):
            if spare.is_file():
                break
            self.save(state, path, case)

    def write_state(self, path: Path, case: Case) -> Any:
        """The spare's inode before a recycling save (None when not recycling or there is none)."""
        spare = Path(durable_spare(path))
        return spare.stat().st_ino if case.get("recycle") and spare.is_file() else None

    def describe_write(self, before: Any, path: Path, case: Case) -> str:
        """Whether a recycling save really overwrote the spare (same inode now at `path`) or made a new file."""
        if not case.get("recycle"):
            return "new file"
        if before is not None and path.stat().st_ino == before:
            return "recycled: overwrote the previous generation's blocks"
        return "recycle requested but the spare was unusable (in use, or none): new file"

    def stage_load(self, case: Case, tensors: Mapping[str, Any], path: Path) -> Any:
        """With load_into: the destination tensors, initialised as a model's are before a restart."""
        return initialised_like(tensors) if case.get("load_into") else None

    def command(self, case: Case, ctx: RunContext) -> list[str]:
        """The API call, with the I/O backend the transfer selects."""
        into = ["into=initialised tensors"] if case.pattern is Pattern.LOAD and case.get("load_into") else []
        recycle = ["recycle=True"] if case.pattern is Pattern.SAVE and case.get("recycle") else []
        mapped = ["mmap=True"] if case.pattern is Pattern.LOAD and case.get("mmap") else []
        return [*super().command(case, ctx), f"backend={self.backends[case.transfer]}", *into, *recycle, *mapped]

    def why_not(self, case: Case, ctx: RunContext) -> str | None:
        """The library must import; CPU_ONLY needs O_DIRECT in the target directory."""
        try:
            import gdsbench.checkpoint  # noqa: F401
        except ImportError as exc:
            return f"gdsbench.checkpoint not importable: {exc}"
        if case.get("mmap") and case.pattern is Pattern.LOAD and case.transfer is not Transfer.CPU_CACHED:
            return "mmap loads read through the page cache: use transfer CPU_CACHED"
        if case.transfer is Transfer.CPU_ONLY:
            return odirect_reason(str(ctx.directory))
        return None

    def errors(self) -> tuple[type[BaseException], ...]:
        """The library's own errors and its O_DIRECT fallback warning (raised as an error here)."""
        from gdsbench.checkpoint import CheckpointError, DirectIOFallbackWarning

        return (*EXPECTED_ERRORS, CheckpointError, DirectIOFallbackWarning)

    def save(self, state: Any, path: Path, case: Case) -> None:
        """gdsbench.checkpoint.save (durable itself: temp file, fsync, rename, directory fsync)."""
        from gdsbench.checkpoint import DirectIOFallbackWarning, save

        with warnings.catch_warnings():
            warnings.simplefilter("error", DirectIOFallbackWarning)
            save(
                state,
                path,
                threads=case.get("threads"),
                backend=self.backends[case.transfer],
                recycle=bool(case.get("recycle")),
            )

    def load(self, path: Path, case: Case, staged: Any) -> Mapping[str, Any]:
        """gdsbench.checkpoint.load with checksum verification, onto the CPU."""
        from gdsbench.checkpoint import DirectIOFallbackWarning, load

        with warnings.catch_warnings():
            warnings.simplefilter("error", DirectIOFallbackWarning)
            return load(
                path,
                map_location="cpu",
                threads=case.get("threads"),
                verify=True,
                backend=self.backends[case.transfer],
                into=staged,
                mmap=bool(case.get("mmap")),
            )


class Safetensors(CheckpointRunner):
    """safetensors save_file + fsync / load_file."""

    name = "safetensors"
    description = "safetensors.torch save_file + fsync; load_file (mmap) with every page touched (page cache)"
    calls = {Pattern.SAVE: "safetensors.torch.save_file", Pattern.LOAD: "safetensors.torch.load_file"}
    packages = ("torch", "safetensors")
    modules = ("torch", "safetensors.torch")
    suffix = ".safetensors"

    def errors(self) -> tuple[type[BaseException], ...]:
        """safetensors' own error type besides the usual ones."""
        from safetensors import SafetensorError

        return (*EXPECTED_ERRORS, SafetensorError)

    def save(self, state: Any, path: Path, case: Case) -> None:
        """save_file (the runner fsyncs the file)."""
        from safetensors.torch import save_file

        save_file(dict(state), str(path))

    def load(self, path: Path, case: Case, staged: Any) -> Mapping[str, Any]:
        """load_file onto the CPU, then every page touched: its tensors may be lazy views of an mmap."""
        from safetensors.torch import load_file

        tensors = load_file(str(path), device="cpu")
        touch_pages(tensors.values())
        return tensors


def durable_spare(path: Path) -> str:
    """Where gdsbench.checkpoint keeps the spare generation of a recycling save to `path`."""
    from gdsbench.checkpoint.durable import spare_path

    return spare_path(str(path))


def initialised_like(tensors: Mapping[str, Any]) -> dict[str, Any]:
    """Zero-filled tensors shaped like `tensors`: memory already touched, as a constructed model's is."""
    import torch

    return {name: torch.zeros_like(tensor) for name, tensor in tensors.items()}


def touch_pages(tensors: Iterable[Any]) -> None:
    """Read one byte of every page of each tensor, so mmap-backed tensors are really in memory."""
    import torch

    for tensor in tensors:
        flat = tensor.reshape(-1).view(torch.uint8)
        if flat.numel():
            flat[::PAGE].sum()
            flat[-1].item()


class Dcp(CheckpointRunner):
    """torch.distributed.checkpoint in a single process: a directory of .distcp files and .metadata."""

    name = "dcp"
    description = "torch.distributed.checkpoint (one process): FileSystemWriter(thread_count=threads) / load in place"
    calls = {
        Pattern.SAVE: "torch.distributed.checkpoint.save(FileSystemWriter)",
        Pattern.LOAD: "torch.distributed.checkpoint.load(FileSystemReader)",
    }
    modules = ("torch", "torch.distributed.checkpoint")
    threaded = True
    suffix = ".dcp"

    def save(self, state: Any, path: Path, case: Case) -> None:
        """dcp.save with FileSystemWriter(sync_files=True) and `threads` writer threads."""
        import torch.distributed.checkpoint as dcp

        writer = dcp.FileSystemWriter(str(path), thread_count=case.get("threads", 1), sync_files=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "assuming the intent is to save in a single process"
            dcp.save(dict(state), storage_writer=writer, no_dist=True)

    def stage_load(self, case: Case, tensors: Mapping[str, Any], path: Path) -> Any:
        """Destination tensors, initialised as the model a DCP load fills would have them."""
        return initialised_like(tensors)

    def load(self, path: Path, case: Case, staged: Any) -> Mapping[str, Any]:
        """dcp.load into the staged destination tensors."""
        import torch.distributed.checkpoint as dcp

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            dcp.load(staged, storage_reader=dcp.FileSystemReader(str(path)), no_dist=True)
        return staged

    def files(self, path: Path) -> list[Path]:
        """Every file DCP wrote into the checkpoint directory."""
        return sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else []

    def complete(self, path: Path) -> bool:
        """A DCP checkpoint is complete once its .metadata is written (DCP writes it last)."""
        return (path / ".metadata").is_file()

    def _track(self, path: Path, ctx: RunContext) -> None:
        """Track the directory (removed at cleanup once its files are gone) when this sweep makes it."""
        ctx.track_new([path])

    def _track_files(self, path: Path, ctx: RunContext) -> None:
        """Files DCP wrote into a directory this sweep made are ours too (cleanup removes them first)."""
        if path in ctx.created:
            ctx.created.extend(p for p in self.files(path) if p not in ctx.created)


class Kvikio(CheckpointRunner):
    """GPUDirect Storage through kvikio's CuFile, from and to CUDA tensors."""

    name = "kvikio"
    description = "kvikio CuFile pwrite/pread of CUDA tensors (GPUDirect Storage), JSON index beside the file"
    calls = {Pattern.SAVE: "kvikio.CuFile.pwrite", Pattern.LOAD: "kvikio.CuFile.pread"}
    transfers = frozenset({Transfer.GDS})
    packages = ("torch",)  # kvikio is checked after CUDA: no GPU is the reason that matters first
    modules = ("torch", "kvikio")
    suffix = ".kvikio"
    alignment = 4096

    def __init__(self) -> None:
        self._staged: tuple[int, dict[str, Any]] | None = None  # (id of the workload dict, its GPU copy)

    def why_not(self, case: Case, ctx: RunContext) -> str | None:
        """GPUDirect Storage needs a CUDA device visible to torch, then kvikio."""
        import torch

        if not torch.cuda.is_available():
            return "needs CUDA: no CUDA device visible to torch"
        if importlib.util.find_spec("kvikio") is None:
            return "kvikio not installed (pip install kvikio-cu12)"
        return None

    def stage_save(self, case: Case, tensors: Mapping[str, Any]) -> Any:
        """The workload copied to the GPU once (one copy kept, for the current workload only)."""
        if self._staged is None or self._staged[0] != id(tensors):
            self._staged = None
            self._staged = (id(tensors), {name: t.cuda() for name, t in tensors.items()})
        return self._staged[1]

    def index_path(self, path: Path) -> Path:
        """The JSON index beside the data file."""
        return path.with_name(path.name + ".json")

    def files(self, path: Path) -> list[Path]:
        """The data file and its index."""
        return [p for p in (path, self.index_path(path)) if p.is_file()]

    def complete(self, path: Path) -> bool:
        """Complete once the index (written last) exists."""
        return path.is_file() and self.index_path(path).is_file()

    def _track(self, path: Path, ctx: RunContext) -> None:
        """Both files are this sweep's when they do not exist yet."""
        ctx.track_new([path, self.index_path(path)])

    def _remove_ours(self, path: Path, ctx: RunContext) -> None:
        """Remove the previous data file and index if this sweep made them."""
        for created in (path, self.index_path(path)):
            if created in ctx.created and created.is_file():
                created.unlink()

    def save(self, state: Any, path: Path, case: Case) -> None:
        """pwrite every tensor at an aligned offset in parallel, then write the index."""
        import kvikio
        import torch

        index, offset = {}, 0
        with kvikio.CuFile(path, "w") as f:
            futures = []
            for name, tensor in state.items():
                data = tensor.reshape(-1).view(torch.uint8)
                index[name] = {
                    "offset": offset,
                    "nbytes": data.numel(),
                    "dtype": str(tensor.dtype).split(".")[-1],
                    "shape": list(tensor.shape),
                }
                futures.append(f.pwrite(data, data.numel(), offset))
                offset += -(-data.numel() // self.alignment) * self.alignment
            for future in futures:
                future.get()
        self.index_path(path).write_text(json.dumps(index))

    def load(self, path: Path, case: Case, staged: Any) -> Mapping[str, Any]:
        """pread every tensor into fresh CUDA memory in parallel."""
        import kvikio
        import torch

        index = json.loads(self.index_path(path).read_text())
        buffers = {
            name: torch.empty(entry["nbytes"], dtype=torch.uint8, device="cuda") for name, entry in index.items()
        }
        with kvikio.CuFile(path, "r") as f:
            futures = [f.pread(buffers[name], entry["nbytes"], entry["offset"]) for name, entry in index.items()]
            for future in futures:
                future.get()
        return {
            name: buffers[name].view(getattr(torch, entry["dtype"])).reshape(entry["shape"])
            for name, entry in index.items()
        }


class DeepSpeed(CheckpointRunner):
    """DeepSpeed's FastFileWriter under torch.save, from page-locked buffers of its aio handle."""

    name = "deepspeed"
    description = "DeepSpeed FastFileWriter (torch.save through libaio O_DIRECT) / aio read + torch.load"
    calls = {
        Pattern.SAVE: "torch.save(deepspeed.io.FastFileWriter)",
        Pattern.LOAD: "deepspeed aio sync_pread + torch.load(weights_only=True)",
    }
    transfers = frozenset({Transfer.CPU_ONLY})
    packages = ("torch", "deepspeed")
    modules = ("torch", "deepspeed.io", "deepspeed.ops.op_builder")
    threaded = True
    block_bytes = 8 << 20
    queue_depth = 32
    buffer_bytes = 64 << 20  # FastFileWriter's locked staging buffer (double-buffered: halves alternate)

    alignment = 4096

    def __init__(self) -> None:
        self._aio: dict[int, tuple[Any, Any]] = {}  # threads -> (aio handle, locked staging buffer)
        self._read_buffer: tuple[Any, Any] | None = None  # (aio handle, locked buffer) of the last load

    def why_not(self, case: Case, ctx: RunContext) -> str | None:
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
    def _cpu_utils_op() -> None:
        """FastFileWriter loads DeepSpeed's `utils` op through the accelerator, and the CPU accelerator
        maps it to a builder that refuses ("not implemented on CPU backend"); the op itself is plain
        C++ (flatten/unflatten, cast_to_byte_tensor), so point FastFileWriter at DeepSpeed's own
        generic builder of it, which compiles for the CPU."""
        import deepspeed.io.fast_file_writer as fast_file_writer
        from deepspeed.ops.op_builder.cpu.no_impl import NotImplementedBuilder
        from deepspeed.ops.op_builder.utils import UtilsBuilder

        if issubclass(fast_file_writer.UtilsBuilder, NotImplementedBuilder):
            fast_file_writer.UtilsBuilder = UtilsBuilder

    def save(self, state: Any, path: Path, case: Case) -> None:
        """torch.save into a FastFileWriter (O_DIRECT through libaio; it fsyncs on close)."""
        import torch
        from deepspeed.io import FastFileWriter, FastFileWriterConfig

        self._cpu_utils_op()
        aio, locked = self.handle(case.get("threads", 1))
        config = FastFileWriterConfig(
            dnvme_handle=aio, pinned_tensor=locked, double_buffer=True, num_parallel_writers=1, writer_rank=0
        )
        writer = FastFileWriter(file_path=str(path), config=config)
        try:
            torch.save(dict(state), writer)
        finally:
            writer.close()

    def stage_load(self, case: Case, tensors: Mapping[str, Any], path: Path) -> Any:
        """A locked read buffer the size of the file, kept and reused (allocated outside the measurement)."""
        import torch

        aio, _ = self.handle(case.get("threads", 1))
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

        threads = case.get("threads", 1)
        aio, _ = self.handle(threads)
        size = staged.numel()
        head = size - size % (self.alignment * threads)
        if head and aio.sync_pread(staged[:head], str(path)) < 0:
            raise OSError(f"deepspeed aio read of {path} failed")
        with open(path, "rb", buffering=0) as f:
            f.seek(head)
            f.readinto(memoryview(staged[head:].numpy()))
        return torch.load(io.BytesIO(memoryview(staged.numpy())), map_location="cpu", weights_only=True)


ENGINES: tuple[CheckpointRunner, ...] = (
    TorchSave(),
    TorchMmap(),
    FastPersist(),
    Safetensors(),
    Dcp(),
    Kvikio(),
    DeepSpeed(),
)
