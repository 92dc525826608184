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


def test_cufile_json_keys_are_its_own_and_env_overrides_are_reported(tmp_path, monkeypatch):
    path = tmp_path / "cufile.json"
    path.write_text(
        '{"properties": {"allow_compat_mode": false, "io_batchsize": 128, "use_compat_mode": true,'
        ' "max_batch_io_size": 64, "use_pci_p2pdma": false}, "profile": {"cufile_stats": 3}}'
    )
    monkeypatch.setenv("CUFILE_ENV_PATH_JSON", str(path))
    monkeypatch.setenv("CUFILE_USE_PCIP2PDMA", "true")
    facts = sysinfo.cufile_config()
    # gdscheck's display names (use_compat_mode, max_batch_io_size) are not cufile.json keys
    assert facts["properties"] == {"allow_compat_mode": False, "io_batchsize": 128, "use_pci_p2pdma": False}
    assert facts["cufile_stats"] == 3
    assert facts["env"] == {"CUFILE_ENV_PATH_JSON": str(path), "CUFILE_USE_PCIP2PDMA": "true"}
    assert sysinfo.cufile_setting(facts, "use_pci_p2pdma") is True  # the environment wins
    assert sysinfo.cufile_setting(facts, "allow_compat_mode") is False


def test_gds_path_verdict_shows_rw_stats_enabled_and_its_remedy():
    from gdsbench import doctor

    def facts(rw: str | None, loaded: bool = True) -> dict:
        nvfs = {"loaded": loaded, "version": "2.25.7", "rw_stats_enabled": rw, "stats": None}
        return {"gpu_gds": {"nvidia_fs": nvfs, "cufile": {"env": {}}}}

    ok, why = doctor._gds_path(facts("0"))
    assert ok and "rw_stats_enabled=0" in why and "echo 1 > /sys/module/nvidia_fs/parameters/rw_stats_enabled" in why
    assert doctor._gds_path(facts("1")) == (True, "nvidia-fs 2.25.7 loaded; rw_stats_enabled=1")
    assert not doctor._gds_path(facts(None, loaded=False))[0]
