"""Checkpoint workloads: synthetic state dicts shaped like real models, or a real state dict from a file.

A preset is a table of layer shapes (GPT-2 XL, Llama 3 8B, a ResNet-like stack of many small tensors)
scaled to a requested byte size: the widest width (the reference, then halves) that fits at least one
layer is kept, the number of layers fills the size, and the embedding's row count takes up the rest,
so the state dict lands within one embedding row of the request (the exact bytes are recorded).
Values are seeded random, never zeros: weights ~ N(0, 0.02) like an initialised model, norms near 1,
counters positive integers; every tensor has its own generator, so a seed always gives the same bytes.

dtype mixes: `bf16` and `fp32` use one dtype for every float tensor; `mixed` keeps the weight matrices
in bf16 and embeddings, norms and biases in fp32, as mixed-precision training keeps them.

torch is imported inside the functions that need it, so a fio-only sweep never loads it.
"""

from __future__ import annotations

import gc
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from gdsbench import mlperf
from gdsbench.units import size_label

#: Widths tried, largest first, until one layer plus the embeddings fit the requested size.
SCALES = tuple(1 / 2**k for k in range(12))
MIN_DIM = 64  # scaled widths are multiples of this (and at least this)
CHUNK_ELEMENTS = 4 << 20  # bf16 tensors are drawn in fp32 chunks of this many values, then converted
FILE_SUFFIXES = (".pt", ".pth", ".bin", ".safetensors")


@dataclass(frozen=True)
class TensorSpec:
    """One tensor of a preset: name ({i} = layer number), shape in named dims ("h", "3h", 1024), role."""

    name: str
    shape: tuple[str | int, ...]
    role: str  # matrix | embedding | norm | bias | count


@dataclass(frozen=True)
class Preset:
    """A model family's layer-shape table: reference dims, tensors per layer and outside the layers."""

    name: str
    description: str
    dims: Mapping[str, int]
    layers: int  # the reference model's layer count (scaling chooses the count it uses)
    layer: tuple[TensorSpec, ...]
    fixed: tuple[TensorSpec, ...]
    rows: str  # the dim (vocabulary, classes) grown to land on the requested size


def _specs(*rows: tuple[str, tuple[str | int, ...], str]) -> tuple[TensorSpec, ...]:
    """TensorSpecs from (name, shape, role) rows."""
    return tuple(TensorSpec(*row) for row in rows)


PRESETS: dict[str, Preset] = {
    preset.name: preset
    for preset in (
        Preset(
            "gpt2-xl",
            "GPT-2 XL-like (Conv1D layers, biases, LayerNorm, tied head)",
            {"h": 1600, "f": 6400, "v": 50257},
            48,
            layer=_specs(
                ("transformer.h.{i}.ln_1.weight", ("h",), "norm"),
                ("transformer.h.{i}.ln_1.bias", ("h",), "bias"),
                ("transformer.h.{i}.attn.c_attn.weight", ("h", "3h"), "matrix"),
                ("transformer.h.{i}.attn.c_attn.bias", ("3h",), "bias"),
                ("transformer.h.{i}.attn.c_proj.weight", ("h", "h"), "matrix"),
                ("transformer.h.{i}.attn.c_proj.bias", ("h",), "bias"),
                ("transformer.h.{i}.ln_2.weight", ("h",), "norm"),
                ("transformer.h.{i}.ln_2.bias", ("h",), "bias"),
                ("transformer.h.{i}.mlp.c_fc.weight", ("h", "f"), "matrix"),
                ("transformer.h.{i}.mlp.c_fc.bias", ("f",), "bias"),
                ("transformer.h.{i}.mlp.c_proj.weight", ("f", "h"), "matrix"),
                ("transformer.h.{i}.mlp.c_proj.bias", ("h",), "bias"),
            ),
            fixed=_specs(
                ("transformer.wte.weight", ("v", "h"), "embedding"),
                ("transformer.wpe.weight", (1024, "h"), "embedding"),
                ("transformer.ln_f.weight", ("h",), "norm"),
                ("transformer.ln_f.bias", ("h",), "bias"),
            ),
            rows="v",
        ),
        Preset(
            "llama3-8b",
            "Llama-3-8B-like (grouped-query attention, SwiGLU MLP, RMSNorm, untied head)",
            {"h": 4096, "kv": 1024, "f": 14336, "v": 128256},
            32,
            layer=_specs(
                ("model.layers.{i}.input_layernorm.weight", ("h",), "norm"),
                ("model.layers.{i}.self_attn.q_proj.weight", ("h", "h"), "matrix"),
                ("model.layers.{i}.self_attn.k_proj.weight", ("kv", "h"), "matrix"),
                ("model.layers.{i}.self_attn.v_proj.weight", ("kv", "h"), "matrix"),
                ("model.layers.{i}.self_attn.o_proj.weight", ("h", "h"), "matrix"),
                ("model.layers.{i}.post_attention_layernorm.weight", ("h",), "norm"),
                ("model.layers.{i}.mlp.gate_proj.weight", ("f", "h"), "matrix"),
                ("model.layers.{i}.mlp.up_proj.weight", ("f", "h"), "matrix"),
                ("model.layers.{i}.mlp.down_proj.weight", ("h", "f"), "matrix"),
            ),
            fixed=_specs(
                ("model.embed_tokens.weight", ("v", "h"), "embedding"),
                ("model.norm.weight", ("h",), "norm"),
                ("lm_head.weight", ("v", "h"), "embedding"),
            ),
            rows="v",
        ),
        Preset(
            "resnet",
            "ResNet-like stack: many small tensors (3x3 convs, batch-norm stats, int64 counters)",
            {"c": 512, "k": 1000},
            50,
            layer=_specs(
                ("layers.{i}.conv.weight", ("c", "c", 3, 3), "matrix"),
                ("layers.{i}.bn.weight", ("c",), "norm"),
                ("layers.{i}.bn.bias", ("c",), "bias"),
                ("layers.{i}.bn.running_mean", ("c",), "bias"),
                ("layers.{i}.bn.running_var", ("c",), "norm"),
                ("layers.{i}.bn.num_batches_tracked", (), "count"),
            ),
            fixed=_specs(
                ("stem.conv.weight", ("c", 3, 7, 7), "matrix"),
                ("fc.weight", ("k", "c"), "embedding"),
                ("fc.bias", ("k",), "bias"),
            ),
            rows="k",
        ),
    )
}

#: dtype (by torch attribute name) of each tensor role under each dtype mix.
DTYPE_MIXES: dict[str, dict[str, str]] = {
    "bf16": {"matrix": "bfloat16", "embedding": "bfloat16", "norm": "bfloat16", "bias": "bfloat16", "count": "int64"},
    "fp32": {"matrix": "float32", "embedding": "float32", "norm": "float32", "bias": "float32", "count": "int64"},
    "mixed": {"matrix": "bfloat16", "embedding": "float32", "norm": "float32", "bias": "float32", "count": "int64"},
}
ITEMSIZE = {"bfloat16": 2, "float32": 4, "int64": 8}
#: Mean and standard deviation of each float role's values (counts are positive integers).
VALUES = {"matrix": (0.0, 0.02), "embedding": (0.0, 0.02), "norm": (1.0, 0.02), "bias": (0.0, 0.02)}


@dataclass(frozen=True)
class WorkloadSpec:
    """What to generate: a preset name or a state-dict file, a target size, a dtype mix and a seed."""

    source: str
    size: int
    dtype: str = "mixed"
    seed: int = 0

    @property
    def is_file(self) -> bool:
        """True when the source is a state-dict file rather than a preset."""
        return not named(self.source)


@dataclass(frozen=True)
class Layout:
    """A preset scaled to a size: its dims, layer count, and the exact bytes it makes."""

    preset: str
    dims: Mapping[str, int]
    layers: int
    nbytes: int


@dataclass(frozen=True)
class Workload:
    """A generated (or loaded) flat state dict and what it is."""

    spec: WorkloadSpec
    tensors: Mapping[str, Any]  # name -> torch.Tensor, contiguous, no shared storages
    nbytes: int
    description: str


class Kind(Protocol):
    """What a `workload` value is, as the checkpoint runners and their ranks ask it (`kind(source)` gives it): one
    state dict every rank takes a share of (`StateDict`), or every rank's own tensors (`mlperf.GeometryKind`)."""

    @property
    def own_tensors(self) -> bool:
        """Whether every rank draws tensors of its own: no state dict to build, map or share (ranks only)."""

    @property
    def from_file(self) -> bool:
        """Whether it is a state-dict file (reading it takes ckptio; safetensors for .safetensors)."""

    @property
    def warmup_saves(self) -> int:
        """Unmeasured saves before a measured save phase on ranks."""

    def label(self, size: int, dtype: str, scale: float) -> str:
        """What a checkpoint's name says of it."""

    def words(self, size: int, dtype: str, scale: object, checkpoints: object) -> list[str]:
        """The `name=value` words of a command line that size it."""

    def reason(self, world_size: int, scale: float, layout: str, train: bool) -> str | None:
        """Why it cannot run on `world_size` ranks at `scale` in `layout` (or in a training loop); None if it can."""

    def facts(self, world_size: int, scale: float) -> tuple[int, str] | None:
        """Bytes every rank writes together and a description; None where only the built state dict says."""

    def rank_tensors(self, rank: int, world_size: int, scale: float) -> list[mlperf.Tensor] | None:
        """The tensors `rank` draws itself; None where it takes a share of the state dict."""

    def source_rank(self, rank: int, world_size: int, ranks_per_node: int) -> int:
        """The rank whose checkpoint `rank` loads."""

    def load_note(self, nbytes: int, memory: int, cache: str) -> str:
        """What a load phase's row says of reading `nbytes` on a host of `memory` bytes (empty: nothing)."""


@dataclass(frozen=True)
class StateDict:
    """A preset at checkpoint_size or a state-dict file: one state dict the sweep builds (or each node generates)
    and every rank takes its share of, as `layout` says."""

    source: str
    own_tensors = False
    warmup_saves = 1  # staging buffers and DCP's plan cache then hold, as from a training run's second checkpoint on

    @property
    def from_file(self) -> bool:
        """A path, not a preset's name."""
        return self.source not in PRESETS

    def label(self, size: int, dtype: str, scale: float) -> str:
        """The preset's name or the file's stem, its size and dtype mix."""
        return f"{Path(self.source).stem if self.from_file else self.source}.{size_label(size)}.{dtype}"

    def words(self, size: int, dtype: str, scale: object, checkpoints: object) -> list[str]:
        """Its size and dtype mix."""
        return [f"checkpoint_size={size_label(size)}", f"dtype={dtype}"]

    def reason(self, world_size: int, scale: float, layout: str, train: bool) -> str | None:
        """Any rank count, layout or loop; sized by checkpoint_size, never by `scale`."""
        if scale != 1.0:
            return f"scale {scale:g} shrinks the MLPerf geometries only; size a preset by checkpoint_size"
        return None

    def facts(self, world_size: int, scale: float) -> None:
        """Known once built."""
        return None

    def rank_tensors(self, rank: int, world_size: int, scale: float) -> None:
        """Every rank takes a share."""
        return None

    def source_rank(self, rank: int, world_size: int, ranks_per_node: int) -> int:
        """Its own."""
        return rank

    def load_note(self, nbytes: int, memory: int, cache: str) -> str:
        """Nothing to say."""
        return ""


def named(value: object) -> bool:
    """Whether a `workload` value names a preset or an MLPerf geometry (else it is a file's path)."""
    return value in PRESETS or mlperf.is_geometry(value)


def kind(source: str) -> Kind:
    """The kind of a `workload` value: an MLPerf geometry's, or a state dict's."""
    return mlperf.GeometryKind(source) if mlperf.is_geometry(source) else StateDict(source)


def parse_source(value: Any) -> str:
    """A `workload` value: a preset name, an MLPerf geometry's name, or a path to an existing
    .pt/.pth/.bin/.safetensors file."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError("not a workload")
    if named(value):
        return value
    path = Path(value).expanduser()
    if path.suffix not in FILE_SUFFIXES or not path.is_file():
        raise ValueError("not a preset or an existing state-dict file")
    return str(path)


def source_expected() -> str:
    """The `workload` key's expectation, for error messages."""
    return (
        f"a preset ({', '.join(PRESETS)}), an MLPerf geometry ({', '.join(mlperf.names())}) or a path to an "
        f"existing {'/'.join(FILE_SUFFIXES)} state dict"
    )


def _dim(expr: str | int, dims: Mapping[str, int]) -> int:
    """The value of a shape entry: a number, a dim name, or a multiple such as '3h'."""
    if isinstance(expr, int):
        return expr
    match = re.fullmatch(r"(\d*)([a-z]+)", expr)
    if match is None:
        raise ValueError(f"bad shape entry {expr!r}")
    factor, name = match.groups()
    return int(factor or 1) * dims[name]


def shape_of(spec: TensorSpec, dims: Mapping[str, int]) -> tuple[int, ...]:
    """A tensor's concrete shape under `dims`."""
    return tuple(_dim(expr, dims) for expr in spec.shape)


def nbytes_of(specs: tuple[TensorSpec, ...], dims: Mapping[str, int], dtype: str) -> int:
    """Bytes the tensors of `specs` take under `dims` and a dtype mix."""
    total = 0
    for spec in specs:
        count = 1
        for size in shape_of(spec, dims):
            count *= size
        total += count * ITEMSIZE[DTYPE_MIXES[dtype][spec.role]]
    return total


def scaled_dims(preset: Preset, scale: float) -> dict[str, int]:
    """The preset's dims times `scale`, as multiples of MIN_DIM (the reference dims are kept at 1)."""
    if scale == 1:
        return dict(preset.dims)
    return {name: max(MIN_DIM, round(value * scale / MIN_DIM) * MIN_DIM) for name, value in preset.dims.items()}


def layout(preset: Preset, size: int, dtype: str) -> Layout:
    """Scale a preset to about `size` bytes: the widest width whose layers hold at least half the bytes
    (as in the reference models; else the widest that fits one layer), then layers, then rows."""
    fits = [plan for scale in SCALES if (plan := _fit(preset, scaled_dims(preset, scale), size, dtype))]
    if not fits:
        smallest = scaled_dims(preset, SCALES[-1])
        least = nbytes_of(preset.fixed, smallest, dtype) + nbytes_of(preset.layer, smallest, dtype)
        raise ValueError(f"{size} bytes is too small for preset {preset.name} (at least {least} bytes)")
    balanced = [plan for plan in fits if 2 * plan.layers * nbytes_of(preset.layer, plan.dims, dtype) >= plan.nbytes]
    return (balanced or fits)[0]


def _fit(preset: Preset, dims: dict[str, int], size: int, dtype: str) -> Layout | None:
    """The preset at fixed widths filled up to `size`: as many layers as fit, then embedding rows."""
    fixed, per_layer = nbytes_of(preset.fixed, dims, dtype), nbytes_of(preset.layer, dims, dtype)
    if fixed + per_layer > size:
        return None
    layers = (size - fixed) // per_layer
    row = nbytes_of(preset.fixed, {**dims, preset.rows: dims[preset.rows] + 1}, dtype) - fixed
    dims = {**dims, preset.rows: dims[preset.rows] + (size - fixed - layers * per_layer) // row}
    return Layout(preset.name, dims, layers, nbytes_of(preset.fixed, dims, dtype) + layers * per_layer)


def tensor_plan(preset: Preset, plan: Layout) -> Iterator[tuple[str, tuple[int, ...], str]]:
    """(name, shape, role) of every tensor of a scaled preset, in state-dict order."""
    head, tail = preset.fixed[:1], preset.fixed[1:]  # the input embedding first, the rest after the layers
    for spec in head:
        yield spec.name, shape_of(spec, plan.dims), spec.role
    for i in range(plan.layers):
        for spec in preset.layer:
            yield spec.name.format(i=i), shape_of(spec, plan.dims), spec.role
    for spec in tail:
        yield spec.name, shape_of(spec, plan.dims), spec.role


def fill(tensor: Any, role: str, generator: Any) -> None:
    """Fill a tensor in place with its role's random values (bf16 drawn in fp32 chunks: faster)."""
    import torch

    flat = tensor.view(-1)
    if role == "count":
        flat.copy_(torch.randint(1, 2**31, flat.shape, generator=generator, dtype=torch.int64))
        return
    mean, std = VALUES[role]
    if tensor.dtype == torch.float32:
        flat.normal_(mean, std, generator=generator)
        return
    scratch = torch.empty(min(CHUNK_ELEMENTS, flat.numel()), dtype=torch.float32)
    for start in range(0, flat.numel(), CHUNK_ELEMENTS):
        part = scratch[: min(CHUNK_ELEMENTS, flat.numel() - start)]
        flat[start : start + part.numel()].copy_(part.normal_(mean, std, generator=generator))


def generate(spec: WorkloadSpec) -> Workload:
    """Build a preset's state dict: every tensor from its own seeded generator, so runs are identical."""
    import torch

    preset = PRESETS[spec.source]
    plan = layout(preset, spec.size, spec.dtype)
    tensors: dict[str, Any] = {}
    for index, (name, shape, role) in enumerate(tensor_plan(preset, plan)):
        tensor = torch.empty(shape, dtype=getattr(torch, DTYPE_MIXES[spec.dtype][role]))
        fill(tensor, role, torch.Generator().manual_seed((spec.seed * 1_000_003 + index) % 2**63))
        tensors[name] = tensor
    dims = ", ".join(f"{k}={v}" for k, v in plan.dims.items())
    described = f"{preset.name}-like, {plan.layers} layers, {dims}, {spec.dtype}"
    return Workload(spec, tensors, plan.nbytes, described)


def read_file(spec: WorkloadSpec) -> Workload:
    """A real state dict from a file, flattened to tensors, each a contiguous copy in memory.

    Loaded with weights_only semantics. Copies break shared storages (safetensors refuses them) and
    take the tensors out of any mmap, so no engine pays for page faults on the source file.
    """
    import torch

    path = Path(spec.source)
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        state = load_file(str(path))
    else:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    from ckptio.inspect import named_tensors

    tensors = {name: t.detach().clone(memory_format=torch.contiguous_format) for name, t in named_tensors(state)}
    if not tensors:
        raise ValueError(f"{path} holds no tensors")
    nbytes = sum(t.numel() * t.element_size() for t in tensors.values())
    return Workload(spec, tensors, nbytes, f"{path.name}: {len(tensors)} tensors")


_CACHE: dict[WorkloadSpec, Workload] = {}


def get(spec: WorkloadSpec) -> Workload:
    """The workload for `spec`, generated once and kept; only one is held, so memory stays bounded."""
    if spec in _CACHE:
        return _CACHE[spec]
    if kind(spec.source).own_tensors:
        raise ValueError("an MLPerf geometry is every rank's own tensors, drawn by the ranks themselves")
    _CACHE.clear()
    gc.collect()  # let the previous workload's memory go before the next one is allocated
    workload = read_file(spec) if spec.is_file else generate(spec)
    _CACHE[spec] = workload
    return workload


def release() -> None:
    """Drop the cached workload (tests and the end of a sweep)."""
    _CACHE.clear()
    gc.collect()
