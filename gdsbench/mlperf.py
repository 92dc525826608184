"""The MLPerf Storage checkpoint geometry: what every rank of the rules' Llama 3 runs writes, from the rules' files.

MLPerf Storage's checkpointing workload (mlcommons/storage) runs DLIO, which builds each rank's tensors from a
model's shape and its parallelism: transformer layers split over pipeline stages and tensor-parallel ranks,
sharded over data-parallel ranks under ZeRO-3; the optimizer's three fp32 groups sharded over every rank under
ZeRO 1-3; under ZeRO 1 and 2 only the first data-parallel replica writes the model. This module reproduces
that arithmetic (DLIO's `base_checkpointing.py`: get_num_parameters, get_layer_parameters,
get_optimization_groups, get_layer_index) so any engine with ranks can write the same bytes per rank.

A run at fewer ranks than the rules fix is a subset (the rules' single-host mode: the first ranks of the full
run, data parallelism as in the rules); at more ranks, a multiple of TP x PP, it is the open division's scaling.
`scale` shrinks every tensor by the same factor so the geometry fits a small machine. These are runs of the
geometry, never MLPerf results: only the official tool's runs carry that name.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from gdsbench.units import GIB


@dataclass(frozen=True)
class Edition:
    """An edition of the rules, as far as the geometry's runs are judged by it: which subsets it accepts."""

    name: str  # "v3.0"
    subset_rule: str  # what a subset run must be, in the rules' words ('' : any subset of a model's ranks)

    def subset_valid(self, model: str, world_size: int) -> bool:
        """Whether the edition accepts a subset run of `model` at `world_size` ranks."""
        return not self.subset_rule or (model == "llama3-8b" and world_size == 8)

    @property
    def rules(self) -> str:
        """Its name as rows and reports say it."""
        return f"MLPerf Storage {self.name} checkpointing rules"


#: The editions a summary can be judged by (Rules.md section 4.3.5): v2.0 took 8-process subsets of every model;
#: v3.0 "A *subset* run must use the "8B" model and a total of exactly 8 accelerators".
EDITIONS = {
    "v2.0": Edition("v2.0", ""),
    "v3.0": Edition("v3.0", "a subset run must use the 8B model and exactly 8 accelerators"),
}
#: The edition gdsbench's own runs of the geometry follow (the current frozen release, package 3.0.x).
CURRENT = EDITIONS["v3.0"]
#: Where the geometry comes from (recorded in every row's note and in the report).
RULES = CURRENT.rules
SOURCE = (
    "mlcommons/storage@caa90c9 (configs/dlio/workload/llama3_*.yaml, Submission_guidelines.md 2.2) and "
    "argonne-lcf/dlio_benchmark@e1919d7 (dlio_benchmark/checkpointing/base_checkpointing.py)"
)
PREFIX = "mlperf-"
DTYPE_BYTES = {"fp16": 2, "bf16": 2, "fp32": 4}


@dataclass(frozen=True)
class Model:
    """One of the rules' models: its transformer shape and the parallelism the rules fix."""

    name: str
    num_layers: int
    hidden_size: int
    ffn_hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    tensor: int
    pipeline: int
    data: int  # data-parallel replicas of a closed run (ranks = tensor x pipeline x data)
    zero_stage: int
    vocab_size: int = 128256
    model_dtype: str = "fp16"
    optimizer_dtype: str = "fp32"

    @property
    def closed_ranks(self) -> int:
        """The rank count a closed run uses."""
        return self.tensor * self.pipeline * self.data


#: configs/dlio/workload/llama3_{8b,70b,405b,1t}.yaml and the rules' Table 2 (TP x PP x DP, ZeRO).
MODELS: dict[str, Model] = {
    m.name: m
    for m in (
        Model("llama3-8b", 32, 4096, 14336, 32, 8, tensor=1, pipeline=1, data=8, zero_stage=3),
        Model("llama3-70b", 80, 8192, 28672, 128, 8, tensor=8, pipeline=1, data=8, zero_stage=3),
        Model("llama3-405b", 126, 16384, 53248, 128, 8, tensor=8, pipeline=32, data=2, zero_stage=1),
        Model("llama3-1t", 128, 25872, 98304, 192, 32, tensor=8, pipeline=64, data=2, zero_stage=1),
    )
}


@dataclass(frozen=True)
class Tensor:
    """One tensor a rank writes: its name in the rank's state dict, element count and dtype."""

    name: str
    numel: int
    dtype: str

    @property
    def nbytes(self) -> int:
        """Its size in bytes."""
        return self.numel * DTYPE_BYTES[self.dtype]


def names() -> list[str]:
    """The workload names (mlperf-llama3-8b, ...)."""
    return [PREFIX + name for name in MODELS]


def is_geometry(workload: object) -> bool:
    """Whether a workload name is one of the geometries."""
    return isinstance(workload, str) and workload in names()


def parse_scale(value: object) -> Fraction:
    """A scale in (0, 1]: a number (0.015625) or a fraction (1/64)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError("not a number")
    try:
        scale = Fraction(value.strip() if isinstance(value, str) else value)
    except (ValueError, TypeError, ZeroDivisionError):
        raise ValueError("not a number or a fraction such as 1/64") from None
    if not 0 < scale <= 1:
        raise ValueError("not in (0, 1]")
    return scale


def scale_value(value: object) -> float:
    """The `scale` key: parse_scale's value as a float (exact for powers of two such as 1/64)."""
    return float(parse_scale(value))


@dataclass(frozen=True)
class Geometry:
    """A model's checkpoint at `world_size` ranks, every tensor shrunk by `scale`."""

    model: Model
    world_size: int
    scale: Fraction = Fraction(1)  # every tensor's elements multiplied by it (at least one element kept)

    def __post_init__(self) -> None:
        mp, closed = self.model_parallel, self.model.closed_ranks
        if self.world_size > closed and self.world_size % mp:
            raise ValueError(
                f"{self.model.name} runs at {closed} ranks, fewer (a subset), or a multiple of TP x PP = {mp} "
                f"(the open division); not {self.world_size}"
            )

    @property
    def model_parallel(self) -> int:
        """Ranks one model replica spans (TP x PP)."""
        return self.model.tensor * self.model.pipeline

    @property
    def data_parallel(self) -> int:
        """Data-parallel replicas: the rules' count in a subset, else what the ranks hold."""
        return self.model.data if self.subset else self.world_size // self.model_parallel

    @property
    def subset(self) -> bool:
        """Whether this run writes only the first ranks' share of the rules' checkpoint."""
        return self.world_size < self.model.closed_ranks

    @property
    def division(self) -> str:
        """closed (the rules' rank count), open (more ranks) or subset (fewer)."""
        if self.subset:
            return "subset"
        return "closed" if self.world_size == self.model.closed_ranks else "open"

    def judged(self, edition: Edition = CURRENT) -> str:
        """The division as `edition` judges it: a subset it does not accept says so, with its rule."""
        if self.subset and not edition.subset_valid(self.model.name, self.world_size):
            return f"subset (not valid under {edition.name}: {edition.subset_rule})"
        return self.division

    def describe(self, edition: Edition = CURRENT) -> str:
        """One line for a row's note: model, ranks, division (as `edition` judges it), scale, and the rules."""
        ranks = f"{self.world_size} ranks"
        if self.subset:
            ranks = f"ranks 0-{self.world_size - 1} of {self.model.closed_ranks}"
        return (
            f"MLPerf Storage checkpoint geometry {self.model.name} ({edition.rules}; not an MLPerf result): {ranks}, "
            f"{self.judged(edition)}, TP {self.model.tensor} x PP {self.model.pipeline} x DP {self.data_parallel}, "
            f"ZeRO {self.model.zero_stage}, scale {self.scale}"
        )

    def rank_tensors(self, rank: int) -> list[Tensor]:
        """What `rank` writes: its model layers (where it writes the model) and its optimizer groups."""
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank {rank} outside 0..{self.world_size - 1}")
        if self.model.zero_stage == 0 and rank >= self.model_parallel:
            return []  # without ZeRO, only the first replica writes
        tensors = self._layers(rank) if self._writes_model(rank) else []
        return tensors + self._optimizer()

    def rank_bytes(self, rank: int) -> int:
        """Bytes `rank` writes per checkpoint."""
        return sum(t.nbytes for t in self.rank_tensors(rank))

    def total_bytes(self) -> int:
        """Bytes every rank of this run writes together per checkpoint. A rank's bytes depend only on its place in
        its model replica and on whether that replica is the first, so whole replicas are counted from two."""
        mp, replicas = self.model_parallel, self.world_size // self.model_parallel
        if replicas < 2 or self.world_size % mp:
            return sum(self.rank_bytes(rank) for rank in range(self.world_size))
        first, other = (sum(self.rank_bytes(rank) for rank in range(i * mp, (i + 1) * mp)) for i in (0, 1))
        return first + (replicas - 1) * other

    def _writes_model(self, rank: int) -> bool:
        """ZeRO 1 and 2 write the model from the first data-parallel replica only."""
        return self.model.zero_stage not in (1, 2) or rank // self.model_parallel == 0

    def _scaled(self, numel: int) -> int:
        """An element count shrunk by `scale` (at least one element)."""
        return max(1, int(numel * self.scale))

    def _layers(self, rank: int) -> list[Tensor]:
        """This rank's model tensors: its pipeline stage's layers, split over TP and, under ZeRO-3, over DP."""
        first, last = self._layer_range((rank // self.model.tensor) % self.model.pipeline)
        return [
            Tensor(f"layer_{i}.{j}", self._scaled(numel), self.model.model_dtype)
            for i in range(first, last + 1)
            for j, numel in enumerate(self._layer_parameters(i))
            if numel > 0
        ]

    def _layer_range(self, stage: int) -> tuple[int, int]:
        """Layers of a pipeline stage: 0 is the embedding (first stage), l+1 and l+2 the head and final norm
        (last stage), 1..l the transformer layers spread over the stages, the first ones taking the remainder."""
        m = self.model
        per, remainder = divmod(m.num_layers, m.pipeline)
        if stage < remainder:
            first = stage * (per + 1) + 1
            last = first + per
        else:
            first = remainder * (per + 1) + (stage - remainder) * per + 1
            last = first + per - 1
        if stage == m.pipeline - 1:
            last = m.num_layers + 2
        if stage == 0:
            first = 0
        return first, last

    def _layer_parameters(self, layer: int) -> list[int]:
        """Elements of one layer's tensors on one rank (DLIO's integer divisions, in its order)."""
        m, sf = self.model, (self.data_parallel if self.model.zero_stage >= 3 else 1)
        h, tp = m.hidden_size, m.tensor
        dim_kv = h // m.num_attention_heads * m.num_kv_heads
        if layer in (0, m.num_layers + 1):
            return [h * m.vocab_size // tp // sf]  # embedding, lm_head
        if layer == m.num_layers + 2:
            return [h // sf]  # final norm
        return [
            h // sf,  # input norm
            h * (h + 2 * dim_kv) // tp // sf,  # q, k, v
            h * h // tp // sf,  # attention output
            h // sf,  # post-attention norm
            h * 2 * m.ffn_hidden_size // tp // sf,  # gated MLP up (two matrices)
            h * m.ffn_hidden_size // tp // sf,  # MLP down
        ]

    def _optimizer(self) -> list[Tensor]:
        """The optimizer's groups on one rank: three of the rank's parameter share and three small ones, fp32."""
        m = self.model
        ranks = self.data_parallel * self.model_parallel if m.zero_stage > 0 else self.model_parallel
        share = num_parameters(m) // ranks
        groups = [share, m.hidden_size * 5] * 3
        return [Tensor(f"optimizer.{k}", self._scaled(n), m.optimizer_dtype) for k, n in enumerate(groups) if n > 0]


def num_parameters(m: Model) -> int:
    """The model's parameter count as DLIO counts it (embedding and head untied, gated MLP)."""
    h = m.hidden_size
    dim_kv = h // m.num_attention_heads * m.num_kv_heads
    embedding = m.vocab_size * h
    layer = h + h * (h + 2 * dim_kv) + h * h + h + m.ffn_hidden_size * 2 * h + m.ffn_hidden_size * h
    return embedding + layer * m.num_layers + h + embedding


def geometry(workload: str, world_size: int, scale: Fraction | float = 1) -> Geometry:
    """The geometry a workload name (mlperf-llama3-8b, ...) names, at `world_size` ranks."""
    return Geometry(MODELS[workload.removeprefix(PREFIX)], world_size, Fraction(scale))


@dataclass(frozen=True)
class GeometryKind:
    """A geometry's name as a workload kind (workloads.Kind): every rank draws tensors of its own, and a load
    reads what the rank one node further on wrote."""

    source: str
    own_tensors = True
    from_file = False
    warmup_saves = 0  # the rules time every checkpoint

    def at(self, world_size: int, scale: float) -> Geometry:
        """The geometry at `world_size` ranks and `scale`."""
        return geometry(self.source, world_size, scale)

    def label(self, size: int, dtype: str, scale: float) -> str:
        """The geometry's name and scale."""
        return f"{self.source}.x{scale:g}"

    def words(self, size: int, dtype: str, scale: object, checkpoints: object) -> list[str]:
        """Its scale and the checkpoints of a phase."""
        return [f"scale={scale}", f"checkpoints={checkpoints}"]

    def reason(self, world_size: int, scale: float, layout: str, train: bool) -> str | None:
        """Save and load phases, sharded, at a rank count the rules allow."""
        if train:
            return "train cases checkpoint a preset; the MLPerf geometries run save and load cases"
        if layout != "sharded":
            return "an MLPerf geometry gives every rank tensors of its own: layout does not apply"
        try:
            self.at(world_size, scale)
        except ValueError as exc:
            return str(exc)
        return None

    def facts(self, world_size: int, scale: float) -> tuple[int, str]:
        """Every rank's bytes together, and the geometry's line."""
        shape = self.at(world_size, scale)
        return shape.total_bytes(), shape.describe()

    def rank_tensors(self, rank: int, world_size: int, scale: float) -> list[Tensor]:
        """What `rank` writes."""
        return self.at(world_size, scale).rank_tensors(rank)

    def source_rank(self, rank: int, world_size: int, ranks_per_node: int) -> int:
        """One node further on (the rules' recovery shift)."""
        return source_rank(rank, world_size, ranks_per_node)

    def load_note(self, nbytes: int, memory: int, cache: str) -> str:
        """The rules' condition on the caches."""
        return cache_rule(nbytes, memory, cache)


def cache_rule(data_bytes: int, memory_bytes: int, cache: str) -> str:
    """The rules' condition on a read phase, for its row: below 3x the client's memory the caches must be
    cleared first (the case's `cache` says whether they were)."""
    share = f"{data_bytes / GIB:.1f} GiB read per host vs 3x memory = {3 * memory_bytes / GIB:.0f} GiB"
    return f"{share}: {cache_verdict(data_bytes, memory_bytes, cache)}"


def cache_verdict(data_bytes: float, memory_bytes: float, cache: str) -> str:
    """Whether a read phase meets the rules' cache condition: beyond 3x memory, or caches cleared first (`cache`
    cold or cold-machine; warm: not cleared; '': not recorded, as in an imported DLIO summary)."""
    if data_bytes >= 3 * memory_bytes:
        return "beyond the page cache, no clearing needed by the rules"
    if cache == "warm":
        return "the rules ask caches cleared first; this warm read does not follow them"
    if not cache:
        return "the rules ask caches cleared first; whether they were is not recorded"
    return "caches cleared first, as the rules ask"


def source_rank(rank: int, world_size: int, ranks_per_node: int) -> int:
    """The rank whose checkpoint `rank` reads back: one node further on (DLIO's recovery_rank_shift), so no
    node reads what it wrote while there are two nodes or more; itself on one node."""
    return (rank + ranks_per_node) % world_size
