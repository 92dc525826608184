"""Which fio servers answer fio's handshake in time: before a multi-host case, each host is probed with fio's
own client (`fio --client=<host> probe.fio`, every host at once). A server answers the client's probe with a
line `hostname=<name>, be=0, 64-bit, os=Linux, ..., fio=fio-3.33, flags=1` as soon as it is connected; a host
that accepts the connection and never says that (a hung server, another service on the port) is silent.
The probe is stopped once the line arrives; its job (ioengine=null) moves no data and makes no file.

A silent host is left out of the case (its rows fail, naming it and the deadline); the case runs on the
others, instead of every host waiting out the case's whole timeout. A host that refuses the connection or
fails otherwise is not silent: the case itself reports it (fio_client).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from gdsbench.errors import GdsbenchError
from gdsbench.hosts import Host
from gdsbench.keys import Key, duration
from gdsbench.runners.base import run_tool

#: A job that runs no I/O (the null engine) and creates no file: only the handshake matters.
PROBE_JOB = "[gdsbench-probe]\nioengine=null\nrw=read\nsize=4k\nfilename=gdsbench-probe\n"
ANSWER = "hostname="


HANDSHAKE_TIMEOUT = Key(
    "handshake_timeout",
    duration,
    "a duration such as 10s",
    10.0,
    "multi-host sweeps: how long each fio server has to answer fio's handshake; a silent one's rows fail, "
    "the other hosts run",
    axis=False,
)


class _Answered(Exception):
    """The server answered the probe: stop the client."""


def silent_hosts(binary: str, hosts: Sequence[Host], deadline: float, folder: Path) -> dict[str, str]:
    """The hosts that did not answer fio's handshake within `deadline` seconds, each with why."""
    folder.mkdir(parents=True, exist_ok=True)
    job = folder / "probe.fio"
    job.write_text(PROBE_JOB)
    with ThreadPoolExecutor(max_workers=max(1, len(hosts))) as pool:
        answered = list(pool.map(lambda host: _answers(binary, host, job, deadline), hosts))
    return {
        host.label: f"fio server {host.label} did not answer fio's handshake within {deadline:g}s; its rows fail, the other "
        "hosts ran"
        for host, ok in zip(hosts, answered)
        if not ok
    }


def _answers(binary: str, host: Host, job: Path, deadline: float) -> bool:
    """True unless the host stayed silent for `deadline` seconds (a refusal or another failure is an answer:
    the case reports it)."""

    seen: list[str] = []

    def watch(text: str) -> None:
        seen.append(text)
        if ANSWER in "".join(seen[-2:]):  # the line may arrive in two pieces
            raise _Answered

    argv = [binary, f"--client={host.spec}", str(job)]
    try:  # a stopped probe's last words are not needed: no grace after SIGINT
        run_tool(argv, timeout=deadline, keep_sigpipe_ignored=True, on_stdout=watch, interrupt_grace=0)
    except _Answered:
        return True
    except GdsbenchError as exc:
        return "timed out" not in str(exc)
    return True
