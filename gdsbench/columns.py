"""What an engine declares besides its options: its traits (where it stores, what bounds it) and the result
columns it adds to a row (name, unit, meaning), as fio's engines carry flags. Runners declare them; the sweep
writes them into each row and the sidecar; reports, flags and qualify read them from there, never an engine name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

TEXT, NUMBER = "text", "number"
#: A value the run was made with, not a figure (a library's option): recorded on the row and in the sidecar,
#: never aggregated by reports nor gated by qualify.
SETTING = "setting"
#: Where an engine's I/O goes: files in the target directory, objects of an object store, a Ceph cluster's
#: objects or images (fio's rados and rbd ioengines).
FILES, OBJECTS, CLUSTER = "files", "objects", "cluster"
#: Bytes moved between ranks, no storage (the collective engine: the peer tier's ceiling).
FABRIC = "fabric"
#: The engine whose best case bounds checkpoints in files: its durable writes (saves) and direct reads (loads).
FILES_CEILING = "fio"
#: The engine whose best case bounds checkpoints in an object store: its PUTs (saves) and GETs (loads).
OBJECTS_CEILING = "s3"
#: The references a baseline engine declares itself (Traits.baseline): every checkpoint engine's ratio to the
#: single-process baseline; a distributed engine's, to the distributed one measured alike.
SINGLE_PROCESS, DISTRIBUTED = "single-process", "distributed"
#: A durability ladder's tiers and each one's row columns (seconds until durable there, the restore from it): the
#: near tier (a ladder's first, RAM or a local folder) and those after it by name, as a row's `tiers` says them.
#: The ladder engines fill them; the report's ladder reads them.
NEAR_TIER = "near"
TIER_COLUMNS = {
    NEAR_TIER: ("durable_local_seconds", "restore_local_seconds"),
    "peer": ("durable_peer_seconds", "restore_peer_seconds"),
    "local": ("durable_disk_seconds", "restore_disk_seconds"),
    "s3": ("durable_object_seconds", "restore_object_seconds"),
}
#: The row columns that carry a row's traits (written by the sweep, read by flags and reports).
TRAIT_COLUMNS = ("stores_on", "ceiling", "baseline")


@dataclass(frozen=True)
class Column:
    """A result column an engine adds to its rows: its name, its unit (bytes, s, us, count, ...) and meaning."""

    name: str
    unit: str
    meaning: str
    kind: str = NUMBER

    def record(self) -> dict[str, str]:
        """The column as the sidecar records it."""
        return asdict(self)


@dataclass(frozen=True)
class Traits:
    """What an engine stores on (FILES, OBJECTS or CLUSTER; `cluster_when`: option values that send a case to a
    cluster instead; `objects_when`: options that, set, send it to an object store, held to OBJECTS_CEILING there)
    , the engine whose best case of the same run bounds it ('': none, it is a ceiling), and the reference it is
    for the others where it is a baseline (SINGLE_PROCESS, DISTRIBUTED; '' for none)."""

    stores_on: str = FILES
    ceiling: str = ""
    cluster_when: tuple[tuple[str, tuple[str, ...]], ...] = ()
    objects_when: tuple[str, ...] = ()
    baseline: str = ""

    def where(self, params: Mapping[str, Any]) -> str:
        """Where a case (its parameters by name) stores its data."""
        if any(params.get(name) in values for name, values in self.cluster_when):
            return CLUSTER
        if any(params.get(name) not in (None, "") for name in self.objects_when):
            return OBJECTS
        return self.stores_on

    def row(self, params: Mapping[str, Any]) -> dict[str, str]:
        """The trait columns of a case's rows (a case an option sent to an object store held to the s3 engine)."""
        where = self.where(params)
        moved = where == OBJECTS and self.stores_on != OBJECTS and self.ceiling
        return {"stores_on": where, "ceiling": OBJECTS_CEILING if moved else self.ceiling, "baseline": self.baseline}


def records(columns: Iterable[Column]) -> dict[str, dict[str, str]]:
    """Declared columns by name, as the sidecar records them (`columns`)."""
    return {column.name: column.record() for column in columns}


def declared(metadata: Mapping[str, Any]) -> dict[str, Column]:
    """The engine columns a results file's sidecar declares (none for files written before declarations)."""
    found = metadata.get("columns")
    if not isinstance(found, Mapping):
        return {}
    fields = ("name", "unit", "meaning", "kind")
    named = {name: v for name, v in found.items() if isinstance(v, Mapping) and v.get("name") == name}
    return {name: Column(**{k: str(v.get(k, "")) for k in fields}) for name, v in named.items()}


#: The legacy reading: files written before rows carried their traits name the engines these lists held then.
LEGACY_OBJECT_ENGINES = ("s3", "s3torch_save", "s3torch_dcp")
LEGACY_CLUSTER_IOENGINES = ("rados", "rbd")
LEGACY_CEILING = {"s3torch_save": "s3", "s3torch_dcp": "s3"}
LEGACY_BASELINES = {"torch_save": SINGLE_PROCESS, "dcp": DISTRIBUTED}


def legacy_traits(engine: str, pattern: str, ioengine: Any) -> tuple[str, str, str]:
    """(stores_on, ceiling, baseline) of a row from a file without trait columns, as gdsbench read such files
    before."""
    if engine in LEGACY_OBJECT_ENGINES:
        stores_on = OBJECTS
    else:
        stores_on = CLUSTER if ioengine in LEGACY_CLUSTER_IOENGINES else FILES
    bounded = pattern in ("save", "load", "train")
    return stores_on, LEGACY_CEILING.get(engine, FILES_CEILING) if bounded else "", LEGACY_BASELINES.get(engine, "")
