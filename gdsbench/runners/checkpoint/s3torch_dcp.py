"""s3torch_dcp: torch.distributed.checkpoint.save/load with s3torchconnector's S3StorageWriter(thread_count=threads)
and S3StorageReader in the sweep's process (no process group): a key prefix a checkpoint, complete once `.metadata` is
there, loaded in place into zero-filled tensors (the measured run, the objects and the conditions: s3torch.py)."""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

from gdsbench import workloads
from gdsbench.cases import Case, Pattern
from gdsbench.errors import ToolError
from gdsbench.runners import s3
from gdsbench.runners.base import RunContext
from gdsbench.runners.checkpoint.base import Package
from gdsbench.runners.checkpoint.conditions import initialised_like
from gdsbench.runners.checkpoint.s3torch import S3TorchRunner, client_config
from gdsbench.runners.s3_client import endpoint_url

ENDPOINT_VARIABLE = s3.ENDPOINT_ENV[1]  # AWS_ENDPOINT_URL: the only endpoint DCP's S3 client reads


class S3TorchDcp(S3TorchRunner):
    """DCP's save/load with S3StorageWriter(thread_count=threads) / S3StorageReader, no process group."""

    name = "s3torch_dcp"
    description = (
        "torch.distributed.checkpoint in one process: s3torchconnector's S3StorageWriter(thread_count="
        "threads) / S3StorageReader (S3)"
    )
    calls = {
        Pattern.SAVE: "torch.distributed.checkpoint.save(S3StorageWriter)",
        Pattern.LOAD: "torch.distributed.checkpoint.load(S3StorageReader)",
    }
    packages = (*S3TorchRunner.packages, Package("tenacity", "pip install 'gdsbench[s3torch]'"))
    modules = ("torch", "torch.distributed.checkpoint", "s3torchconnector.dcp")
    threaded = True
    suffix = ""
    marker = ".metadata"

    def key(self, case: Case, ctx: RunContext) -> str:
        """The checkpoint's prefix, named by its thread_count too: a save writes one data object per thread, and a
        load of `threads` reads the checkpoint a save of `threads` wrote (S3StorageReader has no threads of its own)."""
        return f"{super().key(case, ctx)}.t{case['threads']}"

    def write(self, tensors: Mapping[str, Any], uri: str, case: Case) -> None:
        """dcp.save through S3StorageWriter; every tensor must have its data in the metadata it returns."""
        import torch.distributed.checkpoint as dcp
        from s3torchconnector.dcp import S3StorageWriter

        config = client_config(case)
        writer = S3StorageWriter(case["region"], uri, s3client_config=config, thread_count=case["threads"])
        with one_process():
            metadata = dcp.save(dict(tensors), storage_writer=writer, no_dist=True)
        _check_items(metadata, tensors)

    def read(self, uri: str, case: Case, staged: Any) -> Mapping[str, Any]:
        """dcp.load through S3StorageReader into the tensors made before it."""
        import torch.distributed.checkpoint as dcp
        from s3torchconnector.dcp import S3StorageReader

        reader = S3StorageReader(case["region"], uri, s3client_config=client_config(case))
        with one_process():
            dcp.load(staged, storage_reader=reader, no_dist=True)
        return staged

    def destination(self, workload: workloads.Workload) -> Any:
        """Zero-filled tensors shaped like the workload's, as a model's are before a restart (DCP loads in place)."""
        return initialised_like(workload.tensors)

    def errors(self) -> tuple[type[BaseException], ...]:
        """The engines' failures and DCP's CheckpointException (a BaseException that wraps them)."""
        from torch.distributed.checkpoint import CheckpointException

        return (*super().errors(), CheckpointException)

    def within(self, name: str, key: str) -> bool:
        """Every object under the checkpoint's prefix."""
        return name.startswith(key + "/")

    def whole(self, stored: Mapping[str, int], key: str) -> bool:
        """Complete once DCP's `.metadata` is there (it is written last)."""
        return f"{key}/{self.marker}" in stored

    def cannot_run(self, case: Case, ctx: RunContext) -> str | None:
        """As every s3torch engine, and an endpoint other than AWS_ENDPOINT_URL (the only one DCP's client reads)."""
        reason = super().cannot_run(case, ctx)
        if reason:
            return reason
        wanted, variable = s3.endpoint(case), os.environ.get(ENDPOINT_VARIABLE)
        if variable is None or endpoint_url(variable) != wanted:
            return (
                f"s3torch_dcp's client reads its endpoint from {ENDPOINT_VARIABLE} only ({variable or 'unset'}), "
                f"not this case's {wanted}: set {ENDPOINT_VARIABLE} to it"
            )
        return None


@contextlib.contextmanager
def one_process() -> Iterator[None]:
    """DCP without a process group, its warning that it assumes one process silenced (that is the intent)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield


def _check_items(metadata: Any, tensors: Mapping[str, Any]) -> None:
    """ToolError unless every tensor has data in the checkpoint: DCP's writer threads other than the caller's print
    their exceptions and end, and dcp.save then completes a checkpoint without their items."""
    written = {index.fqn for index in metadata.storage_data}
    missing = sorted(name for name in tensors if name not in written)
    if missing:
        raise ToolError(
            f"s3torch_dcp: the save completed without data for {len(missing)} of {len(tensors)} tensors "
            f"(a writer thread failed; first: {missing[0]!r})"
        )


ENGINE = S3TorchDcp()
