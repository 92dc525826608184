"""dcp_fast: torch.distributed.checkpoint with ckptio's storage layer (Writer / Reader).

DCP's planners, dedup and resharding as they are; each rank writes its share into one new file with
parallel O_DIRECT writes, every chunk checksummed (and compressed per chunk when asked), committed
atomically; loads read only the rows each shard spans, in parallel, verified; `broadcast` reads an item
several ranks need once and sends it over the process group. Ranks launched by torchrun (distributed.py).
A case whose matrix block names a `bucket` saves and loads `s3://bucket/<fresh prefix>/<name>` instead: each rank's
share one data object, `.metadata` the commit (objects.py; dcp_fast_s3.py runs it).
"""

from __future__ import annotations

from typing import Any

from gdsbench.cases import Case, Pattern, Transfer
from gdsbench.columns import Column
from gdsbench.keys import Key, boolean
from gdsbench.runners.base import Measurement, RunContext
from gdsbench.runners.checkpoint import dcp_fast_s3, io_options, objects
from gdsbench.runners.checkpoint.base import CKPTIO, TORCH, Package
from gdsbench.runners.checkpoint.distributed import DistributedRunner
from gdsbench.runners.checkpoint.fastpersist import odirect_reason
from gdsbench.runners.checkpoint.rank_half import StorageLayer
from gdsbench.runners.checkpoint.rank_job import RankJob


class CkptioStorage(StorageLayer):
    """The rank half: ckptio's Writer (the case's threads and codec) and Reader (its broadcast)."""

    def writer(self, job: RankJob) -> Any:
        """ckptio.Writer with the case's IOOptions and codec."""
        from ckptio import Writer

        return Writer(job.path, options=io_options.build(job.threads), compression=job.compression)

    def reader(self, job: RankJob) -> Any:
        """ckptio.Reader with the case's IOOptions and broadcast."""
        from ckptio import Reader

        return Reader(job.path, options=io_options.build(job.threads), broadcast=job.broadcast)


class DcpFast(DistributedRunner):
    """ckptio.Writer / Reader under DCP."""

    name = "dcp_fast"
    environment = io_options.ENVIRONMENT  # IOOptions fields the environment overrides (recorded in rows)
    library_defaults = io_options.LIBRARY_DEFAULTS
    description = "torch.distributed.checkpoint with ckptio.Writer/Reader (O_DIRECT, checksummed, codecs)"
    calls = {
        Pattern.SAVE: "torch.distributed.checkpoint.save(ckptio.Writer)",
        Pattern.LOAD: "torch.distributed.checkpoint.load(ckptio.Reader)",
    }
    transfers = frozenset({Transfer.CPU_ONLY})
    packages = (TORCH, CKPTIO)
    block_options = objects.BLOCK_OPTIONS  # a case's own block's bucket sends its checkpoint to S3
    traits = objects.TRAITS
    ranks = CkptioStorage()
    engine_options = (
        Key(
            "broadcast",
            boolean,
            "true or false",
            False,
            "loads: an item several ranks need is read by one rank and broadcast to the others",
        ),
        *objects.OPTIONS,
    )

    @property
    def columns(self) -> tuple[Column, ...]:  # type: ignore[override]
        """Every distributed engine's columns and the IOOptions the ranks' Writer or Reader ran with."""
        return (*super().columns, *io_options.columns())

    def cannot_run(self, case: Case, ctx: RunContext) -> str | None:
        """The codec's library must be installed; O_DIRECT must work in the directory (the rows say O_DIRECT:
        a page-cache fallback would measure memory, and the ranks refuse it too)."""
        from ckptio import codec

        if case.get("compression") not in codec.names():
            return f"codec {case.get('compression')!r} needs its library: pip install blosc2 zstandard"
        if objects.on_objects(case):
            return dcp_fast_s3.cannot_run(case)
        return odirect_reason(str(ctx.directory))

    def requirements(self, case: Case) -> tuple[Package, ...]:
        """ckptio and torch, and the AWS CRT (ckptio's s3 extra) where the checkpoint is in S3."""
        return (*super().requirements(case), *((objects.AWSCRT,) if objects.on_objects(case) else ()))

    def run(self, case: Case, ctx: RunContext) -> Measurement:
        """As every distributed engine (in S3: dcp_fast_s3)."""
        return dcp_fast_s3.run(self, case, ctx) if objects.on_objects(case) else super().run(case, ctx)

    def command(self, case: Case, ctx: RunContext) -> list[str]:
        """The distributed engines' command; in S3, the fresh prefix each run makes in place of the directory."""
        argv, local = super().command(case, ctx), str(self.path(case, ctx))
        if not objects.on_objects(case):
            return argv
        return [objects.location(case, self.name, local) if word == local else word for word in argv]

    def call(self, case: Case) -> str:
        """The DCP call with our writer or reader and its options."""
        if case.pattern is Pattern.TRAIN:
            return super().call(case)
        if case.pattern is Pattern.LOAD:
            return f"torch.distributed.checkpoint.load(Reader(broadcast={bool(case.get('broadcast'))}))"
        verb = f"async_save({case.get('executor')} executor" if case.get("async") else "save("
        return f"torch.distributed.checkpoint.{verb}Writer(compression={case.get('compression')!r}))"


ENGINE = DcpFast()
