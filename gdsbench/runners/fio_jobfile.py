"""fio options as (key, value) pairs, rendered as a command line or as a job file, one per host.

In client mode every job option must be in the job file (options after `--client` are ignored), so a
case's options are kept as pairs (`fio_job.job_options`) that render either way: `render_args` gives
standalone fio's argv, `render_section` a job-file section.

Hosts that share a file system must not write each other's files: each host's job gets a name of its
own (`<name>.h<index>`), and `unique_filename=0` turns off fio's own prefix, which is the server's bound
address (`getsockname`): the same `127.0.0.1.` for every loopback server, and 4 bytes of the socket
path read as an IPv4 address (`109.112.47.102.`) for every unix socket in one folder (fio 3.33).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gdsbench.hosts import Host

#: One fio option: (key, value), value None for a flag such as `time_based`.
Option = tuple[str, "str | None"]

#: Job options whose value names files the client writes: each host's gets `.h<index>`, as its job name.
PER_HOST = ("write_bw_log", "write_lat_log", "write_iops_log")
#: Characters a job-file value must not hold: a line break would start a new option (`exec_prerun=`),
#: and fio's client expands `${VAR}` from its own environment before sending the file.
_UNSAFE = ("\n", "\r", "\0", "$")


def render_args(options: Sequence[Option]) -> list[str]:
    """The options as fio command-line arguments: `--key=value`, or `--key` for a flag."""
    return [f"--{key}" if value is None else f"--{key}={value}" for key, value in options]


def render_section(name: str, options: Sequence[Option]) -> str:
    """A job-file section `[name]` holding the options, one `key=value` (or `key`) per line."""
    for text in (name, *(part for option in options for part in option if part is not None)):
        _check(text)
    if "]" in name or not name.strip():
        raise ValueError(f"a job name without ']': {name!r}")
    lines = [f"[{name}]", *(key if value is None else f"{key}={value}" for key, value in options)]
    return "\n".join(lines) + "\n"


def _check(text: str) -> None:
    """Refuse a name or value that would change the meaning of a job file."""
    bad = [c for c in _UNSAFE if c in text]
    if bad:
        raise ValueError(f"a job-file value without {', '.join(map(repr, bad))}: {text!r}")


@dataclass(frozen=True)
class HostJob:
    """What one host runs: its job name (unique to the host) and the job options, name excluded."""

    host: Host
    name: str
    options: tuple[Option, ...]

    def text(self) -> str:
        """The job file this host is sent."""
        return render_section(self.name, self.options)

    def get(self, key: str, default: str | None = None) -> str | None:
        """The value of one option, or `default`."""
        return next((value for k, value in self.options if k == key), default)

    def files(self) -> list[Path]:
        """The files fio makes for this job, one per numjobs (`<directory>/<name>.<job>.0`), seen from its host."""
        directory = Path((self.get("directory") or ".").replace("\\:", ":"))
        return [directory / f"{self.name}.{job}.0" for job in range(int(self.get("numjobs") or 1))]


def host_jobs(hosts: Sequence[Host], options: Sequence[Option]) -> tuple[HostJob, ...]:
    """One job per host from one case's options: the `name` option (and log names) get `.h<index>`;
    unique_filename=0."""
    names = [value for key, value in options if key == "name"]
    if len(names) != 1 or not names[0]:
        raise ValueError("the options name the job exactly once (name=...)")
    rest = tuple(option for option in options if option[0] != "name")
    if not any(key == "unique_filename" for key, _ in rest):
        rest += (("unique_filename", "0"),)
    return tuple(HostJob(host, f"{names[0]}.h{index}", _own_logs(rest, index)) for index, host in enumerate(hosts))


def _own_logs(options: tuple[Option, ...], index: int) -> tuple[Option, ...]:
    """The options with host `index`'s log names: two servers at one address would share a log file."""
    return tuple((key, f"{value}.h{index}" if key in PER_HOST and value else value) for key, value in options)


def write_job_files(jobs: Sequence[HostJob], folder: Path, stem: str) -> list[Path]:
    """Write each host's job file into `folder` as `<stem>.h<index>.fio`; return their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for index, job in enumerate(jobs):
        path = folder / f"{stem}.h{index}.fio"
        path.write_text(job.text())
        paths.append(path)
    return paths
