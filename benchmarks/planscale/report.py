"""Output: the CSV (exactly CSV_COLUMNS), the printed tables, the figure, and the model/real ratios of
`--validate` with their within-2x verdicts."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from .measure import ENGINES, PHASES

CSV_COLUMNS = ("world_size", "engine", "phase", "seconds", "metadata_bytes")


def write_csv(rows: list[dict[str, Any]], path: Path) -> None:
    """The CSV: exactly CSV_COLUMNS, one row per (world_size, engine, phase)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(CSV_COLUMNS)
        for row in rows:
            w.writerow([row["world_size"], row["engine"], row["phase"], f"{row['seconds']:.6f}", row["metadata_bytes"]])


def table(rows: list[dict[str, Any]]) -> str:
    """A readable table of the rows in milliseconds (rank 0's CPU time but `wall`; `storage`: part of `plan`)."""
    names = ("ranks", "engine", "phase", "plan ms", "storage ms", "wall ms", "global ms", "commit ms", "decode ms")
    head = "{:>6} {:<9} {:<12} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>8} {:>12} {:>4}".format(
        *names, "recv MB", "metadata", "reps"
    )
    lines = [head, "-" * len(head)]
    keys = ("seconds", "storage_seconds", "wall_seconds", "global_seconds", "commit_seconds")
    for r in rows:
        times = " ".join(f"{r[k] * 1e3:10.2f}" for k in keys)
        model = "decode_seconds" in r
        gathered = (
            f"{r['decode_seconds'] * 1e3:10.2f} {r['received_bytes'] / 1e6:8.2f}" if model else f"{'-':>10} {'-':>8}"
        )
        case = f"{r['world_size']:>6} {r['engine']:<9} {r['phase']:<12}"
        lines.append(f"{case} {times} {gathered} {r['metadata_bytes']:>12,} {r['reps']:>4}")
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """Seconds vs world size (log-log, one line per engine x phase) and metadata bytes vs world size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for engine in ENGINES:
        for phase, marker in zip(PHASES, "osD"):
            sel = [r for r in rows if r["engine"] == engine and r["phase"] == phase]
            style = "-" if engine == "dcp_fast" else "--"
            left.plot(
                [r["world_size"] for r in sel],
                [r["seconds"] for r in sel],
                style,
                marker=marker,
                label=f"{engine} {phase}",
            )
        sel = [r for r in rows if r["engine"] == engine and r["phase"] == "first_save"]
        right.plot([r["world_size"] for r in sel], [r["metadata_bytes"] for r in sel], marker="o", label=engine)
    sizes = sorted({int(r["world_size"]) for r in rows})
    for ax, title, unit in ((left, "rank 0's planning time", "CPU seconds"), (right, ".metadata size", "bytes")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(sizes, [f"{n:,}" for n in sizes])
        ax.set_xlabel("world size (ranks)")
        ax.set_ylabel(unit)
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("DCP planning: Llama-3-8B-like state dict, 291 Shard(0) DTensors over N ranks (model of rank 0)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def ratios(model: list[dict[str, Any]], real: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """model / real per world size, engine and phase: planning CPU time, planning wall time, metadata bytes."""
    index = {(r["world_size"], r["engine"], r["phase"]): r for r in real}
    out = []
    for m in model:
        r = index[(m["world_size"], m["engine"], m["phase"])]
        out.append(
            {
                "world_size": m["world_size"],
                "engine": m["engine"],
                "phase": m["phase"],
                "model_seconds": m["seconds"],
                "real_seconds": r["seconds"],
                "cpu_ratio": m["seconds"] / r["seconds"],
                "model_wall_seconds": m["wall_seconds"],
                "real_wall_seconds": r["wall_seconds"],
                "wall_ratio": m["wall_seconds"] / r["wall_seconds"],
                "model_metadata_bytes": m["metadata_bytes"],
                "real_metadata_bytes": r["metadata_bytes"],
                "metadata_ratio": m["metadata_bytes"] / r["metadata_bytes"],
            }
        )
    return out


def write_ratios(rows: list[dict[str, Any]], path: Path) -> None:
    """The validation CSV."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        for row in rows:
            w.writerow({k: f"{v:.6f}" if isinstance(v, float) else v for k, v in row.items()})


def within(rows: list[dict[str, Any]], key: str, factor: float = 2.0) -> bool:
    """Every ratio `key` lies within `factor` of 1."""
    return all(1 / factor <= r[key] <= factor for r in rows)


def ratio_table(rows: list[dict[str, Any]]) -> str:
    """A readable table of the validation ratios (milliseconds) and the within-2x verdicts."""
    names = ("ranks", "engine", "phase", "model ms", "real ms", "cpu m/r", "model wall", "real wall", "wall m/r")
    head = "{:>6} {:<9} {:<12} {:>9} {:>9} {:>8} {:>10} {:>10} {:>9} {:>7}".format(*names, "md m/r")
    lines = [head, "-" * len(head)]
    for r in rows:
        ms = [r[k] * 1e3 for k in ("model_seconds", "real_seconds", "model_wall_seconds", "real_wall_seconds")]
        lines.append(
            f"{r['world_size']:>6} {r['engine']:<9} {r['phase']:<12} {ms[0]:9.2f} {ms[1]:9.2f} {r['cpu_ratio']:8.2f} "
            f"{ms[2]:10.2f} {ms[3]:10.2f} {r['wall_ratio']:9.2f} {r['metadata_ratio']:7.3f}"
        )
    verdict = {key: "yes" if within(rows, key) else "NO" for key in ("cpu_ratio", "wall_ratio", "metadata_ratio")}
    lines.append(
        f"model within 2x of the real runs: planning CPU time {verdict['cpu_ratio']}, "
        f"wall time {verdict['wall_ratio']}, metadata bytes {verdict['metadata_ratio']}"
    )
    return "\n".join(lines)
