"""What one measurement is: patterns, transfer types and the frozen Case, plus matrix expansion."""

from __future__ import annotations

import enum
import itertools
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any


class Pattern(str, enum.Enum):
    """Access pattern: fio/gdsio IO patterns, checkpoint save/load, train (a training loop that checkpoints) and
    exchange (ranks moving bytes to each other: the fabric's ceiling)."""

    READ = "read"
    WRITE = "write"
    RANDREAD = "randread"
    RANDWRITE = "randwrite"
    SAVE = "save"
    LOAD = "load"
    TRAIN = "train"
    EXCHANGE = "exchange"  # bytes moved between ranks by torch.distributed (the collective engine: no storage)

    @property
    def is_write(self) -> bool:
        """True for patterns that move data to storage."""
        return self in (Pattern.WRITE, Pattern.RANDWRITE, Pattern.SAVE)


class Transfer(str, enum.Enum):
    """Where the data lives in memory and how it reaches storage: gdsio's names plus CPU_CACHED."""

    GDS = "GDS"  # GPU memory <-> storage through cuFile (gdsio -x 0)
    CPU_ONLY = "CPU_ONLY"  # host memory, O_DIRECT (gdsio -x 1)
    CPU_GPU = "CPU_GPU"  # storage -> host bounce buffer -> GPU (gdsio -x 2)
    CPU_ASYNC_GPU = "CPU_ASYNC_GPU"  # as CPU_GPU with async cudaMemcpy (gdsio -x 3)
    CPU_CACHED_GPU = "CPU_CACHED_GPU"  # through the page cache, then to the GPU (gdsio -x 4)
    GPU_ASYNC = "GPU_ASYNC"  # cuFile stream/async API (gdsio -x 5)
    GPU_BATCH = "GPU_BATCH"  # cuFile batch API (gdsio -x 6)
    CPU_CACHED = "CPU_CACHED"  # host memory through the page cache, no GPU (not in gdsio)


#: Axes every runner understands; runners add their own option keys.
CORE_AXES = ("engine", "pattern", "transfer", "io_size", "threads", "iodepth")


@dataclass(frozen=True)
class Case:
    """One point of the sweep matrix: an engine and the parameter values it uses, in a fixed order."""

    engine: str
    params: tuple[tuple[str, Any], ...]

    def with_params(self, **changes: Any) -> Case:
        """The same case with some parameter values replaced (a train case's save and load steps)."""
        return Case(self.engine, tuple((k, changes.get(k, v)) for k, v in self.params))

    def get(self, name: str, default: Any = None) -> Any:
        """The value of parameter `name`, or `default` when the engine does not use it."""
        try:
            return self[name]
        except KeyError:
            return default

    def __getitem__(self, name: str) -> Any:
        """The value of parameter `name` (the config filled in its default); KeyError when the engine does
        not use it, so a runner reading an option it never declared fails loudly instead of reading None."""
        for key, value in self.params:
            if key == name:
                return value
        raise KeyError(f"{self.engine} cases have no parameter {name!r}")

    @property
    def pattern(self) -> Pattern:
        """The access pattern."""
        return self.get("pattern")

    @property
    def transfer(self) -> Transfer:
        """The transfer type."""
        return self.get("transfer")

    @property
    def key(self) -> str:
        """A stable text identity, used to resume sweeps and to match cases across runs."""
        parts = [f"engine={self.engine}"]
        parts += [f"{name}={plain(value)}" for name, value in self.params]
        return ",".join(parts)

    def row(self) -> dict[str, Any]:
        """The case as flat result columns."""
        return {"engine": self.engine, **{name: plain(value) for name, value in self.params}}


def plain(value: Any) -> Any:
    """Enum members as their YAML spelling, everything else unchanged."""
    return value.value if isinstance(value, enum.Enum) else value


def cross_product(matrix: Mapping[str, list[Any]]) -> Iterator[dict[str, Any]]:
    """Every combination of the matrix lists, the last key varying fastest (as nested loops)."""
    names = list(matrix)
    for values in itertools.product(*(matrix[name] for name in names)):
        yield dict(zip(names, values))


def matches(point: Mapping[str, Any], rule: Mapping[str, Any]) -> bool:
    """True when every key of an exclude rule equals the point's value."""
    return all(name in point and point[name] == value for name, value in rule.items())


def unique(cases: Iterable[Case]) -> list[Case]:
    """Drop repeated cases, keeping first-seen order."""
    return list(dict.fromkeys(cases))
