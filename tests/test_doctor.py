"""`gdsbench doctor` and the GPU/GDS probes behind it, run for real on this machine."""

from __future__ import annotations

import json

from click.testing import CliRunner

from gdsbench import sysinfo
from gdsbench.cli import cli

CUFILE_JSON = """{
    // cufile.json allows comments
    "logging": { "dir": "/var/log", "level": "ERROR" },
    "properties": {
        "max_direct_io_size_kb" : 16384, /* a block comment */
        "allow_compat_mode": true,
        "rdma_dev_addr_list": [ ],
        "unrelated": "http://not-a-comment"
    }
}
"""


def run(*args: str, env: dict | None = None):
    """Invoke the CLI in-process."""
    return CliRunner().invoke(cli, list(args), env=env)


def test_doctor_runs_and_reports_the_gpu_truthfully(tmp_path):
    result = run("doctor", "--directory", str(tmp_path))
    assert result.exit_code == 0, result.output
    for path in ("GPU", "fio CPU_ONLY/CPU_CACHED", "gdsio", "GDS path (nvidia-fs)", "kvikio", "O_DIRECT on target"):
        assert path in result.output
    if not sysinfo.gpus()["gpus"]:
        assert "no NVIDIA GPU visible" in result.output


def test_doctor_json_parses_and_holds_the_sidecar_facts(tmp_path):
    result = run("doctor", "--json", "--directory", str(tmp_path))
    assert result.exit_code == 0, result.output
    facts = json.loads(result.output)
    assert set(facts) >= {"machine", "target", "tools", "gpu_gds", "can_run"}
    assert facts["target"]["directory"] == str(tmp_path)
    assert facts["target"]["odirect"] == sysinfo.odirect_works(tmp_path)[0]
    gpus = facts["gpu_gds"]["gpus"]["gpus"]
    assert facts["can_run"]["GPU"]["ok"] == bool(gpus)
    assert facts["can_run"]["fio GDS/CPU_GPU (libcufile)"]["ok"] == (
        "libcufile" in facts["tools"]["fio_engines"] and bool(gpus)
    )
    assert facts["gpu_gds"]["nvidia_fs"]["loaded"] == facts["can_run"]["GDS path (nvidia-fs)"]["ok"]


def test_doctor_uses_the_gdsio_given(tmp_path):
    fake = tmp_path / "gdsio"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    facts = json.loads(run("doctor", "--json", "--gdsio", str(fake), "--directory", str(tmp_path)).output)
    assert facts["gpu_gds"]["gdsio"] == {"path": str(fake), "how": "the gdsio option"}


def test_cufile_json_with_comments_is_read(tmp_path, monkeypatch):
    path = tmp_path / "cufile.json"
    path.write_text(CUFILE_JSON)
    monkeypatch.setenv("CUFILE_ENV_PATH_JSON", str(path))
    facts = sysinfo.cufile_config()
    assert facts["path"] == str(path) and facts["exists"]
    assert facts["properties"] == {"allow_compat_mode": True, "max_direct_io_size_kb": 16384}
    assert facts["logging_level"] == "ERROR"
    assert json.loads(sysinfo.strip_json_comments(CUFILE_JSON))["properties"]["unrelated"] == "http://not-a-comment"


def test_broken_cufile_json_is_reported_not_raised(tmp_path, monkeypatch):
    path = tmp_path / "cufile.json"
    path.write_text("{ nope")
    monkeypatch.setenv("CUFILE_ENV_PATH_JSON", str(path))
    assert "cannot read" in sysinfo.cufile_config()["error"]


def test_kvikio_compat_mode_follows_env_and_nvidia_fs(monkeypatch):
    monkeypatch.delenv("KVIKIO_COMPAT_MODE", raising=False)
    assert sysinfo.kvikio_mode(nvfs_loaded=False)["compat_mode"] is True
    assert sysinfo.kvikio_mode(nvfs_loaded=True)["compat_mode"] is False
    monkeypatch.setenv("KVIKIO_COMPAT_MODE", "ON")
    assert sysinfo.kvikio_mode(nvfs_loaded=True) | {"versions": {}, "installed": False} == {
        "versions": {},
        "installed": False,
        "compat_mode": True,
        "why": "KVIKIO_COMPAT_MODE=ON",
    }
    monkeypatch.setenv("KVIKIO_COMPAT_MODE", "off")
    assert sysinfo.kvikio_mode(nvfs_loaded=False)["compat_mode"] is False
