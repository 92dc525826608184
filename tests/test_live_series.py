"""Live figures and time series from real fio output: periodic status documents, normal client output,
bandwidth/latency logs; run_tool streaming; series plots."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gdsbench import results
from gdsbench.cases import Pattern
from gdsbench.runners import fio_live, fio_series
from gdsbench.runners.base import LiveStatus, RunContext, Sample, run_tool
from gdsbench.runners.fio import FioRunner
from gdsbench.runners.fio_output import parse_json
from tests.helpers import fio_case

DATA = Path(__file__).parent / "data"
STATUS = DATA / "fio" / "live" / "status-interval.txt"
CLIENT = DATA / "fio-client" / "sock2-write-2jobs-normal.txt"
LOGS = DATA / "fio" / "series"


def documents(text: str) -> list[dict]:
    """Every top-level JSON document of fio's output."""
    decoder = json.JSONDecoder()
    return [decoder.raw_decode(text, m.start())[0] for m in re.finditer(r"^\{", text, re.MULTILINE)]


def test_status_documents_become_live_figures_as_they_arrive():
    text = STATUS.read_text()
    seen: list[LiveStatus] = []
    stream = fio_live.StatusStream(seen.append, Pattern.WRITE)
    for start in range(0, len(text), 777):  # in pieces, as a pipe delivers them
        stream.feed(text[start : start + 777])
    docs = documents(text)
    assert len(seen) == len(docs) == 4  # three periodic documents and the final one
    first = [job["write"] for job in docs[0]["jobs"]]
    assert seen[0].bytes == sum(j["io_bytes"] for j in first)
    assert seen[0].bw_bytes == pytest.approx(seen[0].bytes / (max(j["runtime"] for j in first) / 1000))
    second = [job["write"] for job in docs[1]["jobs"]]
    interval = (max(j["runtime"] for j in second) - max(j["runtime"] for j in first)) / 1000
    moved = sum(j["io_bytes"] for j in second) - seen[0].bytes
    assert seen[1].bw_bytes == pytest.approx(moved / interval)
    ios = sum(j["total_ios"] for j in second) - sum(j["total_ios"] for j in first)
    assert seen[1].iops == pytest.approx(ios / interval)


def test_final_only_keeps_the_results_document():
    proc = subprocess.CompletedProcess(["fio"], 0, STATUS.read_text(), "")
    kept = fio_live.final_only(proc)
    assert len(documents(kept.stdout)) == 1
    assert documents(kept.stdout)[0] == documents(STATUS.read_text())[-1]
    assert parse_json(kept)["jobs"][0]["write"]["runtime"] >= 3000


def test_client_output_reports_each_hosts_jobs_as_they_arrive():
    text = CLIENT.read_text()
    seen: list[LiveStatus] = []
    fio_live.ClientStream(seen.append, {"fixture.h0": "sock:/s0", "fixture.h1": "sock:/s1"}).feed(text)
    assert [s.host for s in seen] == ["sock:/s0", "sock:/s0", "sock:/s1", "sock:/s1"]  # All clients is not a host
    assert all(s.done and s.bytes == 16 << 20 for s in seen)
    assert seen[0].seconds == 0.049 and seen[0].iops == 326
    assert seen[0].bw_bytes == pytest.approx((16 << 20) / 0.049)


def test_logs_become_samples_and_are_removed(tmp_path):
    for path in LOGS.glob("*.log"):
        (tmp_path / path.name).write_bytes(path.read_bytes())
    found = fio_series.collect(tmp_path / "read-2jobs", jobs=2)
    bw = [line.split(",") for line in (LOGS / "read-2jobs_bw.1.log").read_text().splitlines()]
    job1 = [s for s in found if s.job == 1 and s.bw_bytes is not None]
    assert [(s.time_s, s.bw_bytes) for s in job1] == [(int(t) / 1000, int(v) * 1024) for t, v, *_ in bw]
    clat = (LOGS / "read-2jobs_clat.2.log").read_text().splitlines()[0].split(",")
    first = next(s for s in found if s.job == 2 and s.time_s == int(clat[0]) / 1000)
    assert first.lat_us == int(clat[1]) / 1000
    assert list(tmp_path.iterdir()) == [], "every log fio wrote (bw, lat, clat, slat) was removed"


def test_client_log_names_of_a_socket_host_get_their_folders(tmp_path):
    from gdsbench.hosts import parse_host

    host = parse_host("sock:/run/gdsbench/s0.sock")
    fio_series.prepare_client(tmp_path, "run.h0", 2, host)
    path = fio_series.log_path(tmp_path / "run.h0", "bw", 2, host.address)
    assert path == tmp_path / "run.h0_bw.2.log./run/gdsbench/s0.sock" and path.parent.is_dir()
    path.write_text("100, 2048, 0, 0, 0\n")
    assert fio_series.collect(tmp_path / "run.h0", 2, host.address) == (Sample(2, 0.1, 2048 * 1024, None),)
    assert list(tmp_path.iterdir()) == [], "the folders made for the socket path are gone"


@pytest.mark.needs_fio
@pytest.mark.needs_odirect
def test_a_run_reports_live_figures_and_keeps_its_series(tmp_path):
    seen: list[LiveStatus] = []
    ctx = RunContext(
        directory=tmp_path,
        file_size=32 << 20,
        runtime=2.2,
        raw_dir=tmp_path / "raw",
        series_ms=200,
        status_interval=1,
        on_status=seen.append,
    )
    measurement = FioRunner().run(fio_case(pattern=Pattern.READ, ioengine="psync"), ctx)
    assert len(seen) >= 2 and all(s.bw_bytes > 0 for s in seen)
    assert len(documents(measurement.raw or "")) == 1, "the periodic documents are not kept"
    assert len([s for s in measurement.series if s.bw_bytes]) >= 8
    assert not list((tmp_path / "raw" / "series").iterdir()), "fio's log files were read and removed"


def test_run_tool_streams_stdout_and_keeps_its_guarantees(tmp_path):
    chunks: list[tuple[float, str]] = []
    code = "import sys, time\nfor i in range(3):\n    print(i, flush=True)\n    time.sleep(0.3)\nprint('e', file=sys.stderr)"
    started = time.monotonic()
    proc = run_tool([sys.executable, "-c", code], 30, on_stdout=lambda t: chunks.append((time.monotonic(), t)))
    assert "".join(t for _, t in chunks) == proc.stdout == "0\n1\n2\n" and proc.stderr == "e\n"
    assert chunks[0][0] - started < 0.5, "the first line arrived while the tool still ran"


def test_a_timeout_interrupts_first(tmp_path):
    marker = tmp_path / "interrupted"
    code = (
        "import signal, sys, time, pathlib\n"
        f"signal.signal(signal.SIGINT, lambda *a: (pathlib.Path({str(marker)!r}).write_text('yes'), sys.exit(0)))\n"
        "time.sleep(60)"
    )
    from gdsbench.errors import ToolError

    with pytest.raises(ToolError, match="timed out after 1s"):
        run_tool([sys.executable, "-c", code], 1)
    assert marker.read_text() == "yes", "SIGINT came first (fio's client then stops its servers' jobs)"


def test_sigpipe_stays_ignored_on_request():
    code = "import signal; print(signal.getsignal(signal.SIGPIPE) == signal.SIG_IGN)"
    assert run_tool([sys.executable, "-c", code], 30, keep_sigpipe_ignored=True).stdout == "True\n"
    # Python itself ignores SIGPIPE at start-up: read the disposition the child was started with instead.
    shell = ["grep", "SigIgn", "/proc/self/status"]
    ignored = int(run_tool(shell, 30, keep_sigpipe_ignored=True).stdout.split()[1], 16)
    default = int(run_tool(shell, 30).stdout.split()[1], 16)
    assert ignored & (1 << 12) and not default & (1 << 12)  # SIGPIPE is signal 13: bit 12


def test_series_table_and_plots(tmp_path):
    csv_path = tmp_path / "r.csv"
    writer = results.SeriesWriter(results.series_path(csv_path))
    identity = {"run_id": "r", "case": "engine=fio,pattern=read", "host": "h", "repetition": 1}
    writer.write(identity, [Sample(1, t / 10, 1e9 - t * 1e7, 100.0) for t in range(1, 20)])
    writer.close()
    table = results.load_series([csv_path])
    assert len(table) == 19 and table["bw_bytes"].iloc[0] == 1e9 - 1e7 and set(table["source"]) == {str(csv_path)}
    from gdsbench.report import plots, series

    written = plots.save(series.figures(table), tmp_path / "figs", formats=("png",))
    assert [p.name for p in written] == ["series-01-fio-read.png"]  # index, engine, pattern (nothing else varies)
    assert written[0].stat().st_size > 10_000
