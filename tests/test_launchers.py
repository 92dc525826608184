"""How ranks start and find their place: the `launcher:` setting, each launcher's commands, the rank variables
of torchrun, Slurm, Open MPI, MPICH's Hydra and a Kubernetes Indexed Job mapped onto torch's env:// rendezvous,
and the launchers' own failure messages (recorded from real runs on this machine)."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gdsbench import config, launchers, rank_env
from gdsbench.errors import ConfigError, UsageError
from gdsbench.launchers import Launch, Program

PROGRAM = Program("gdsbench.cli_rank", ("--case", "engine=dcp_fast,pattern=save"), python="/venv/bin/python")

#: What each launcher sets on rank 1 of 4 (2 per node), as read from their documentation and seen on this machine.
RANK_VARIABLES = {
    "torchrun": {"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0"},
    "srun": {
        "SLURM_PROCID": "1",
        "SLURM_NTASKS": "4",
        "SLURM_LOCALID": "1",
        "SLURM_NODEID": "0",
        "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
    },
    "mpirun": {
        "OMPI_COMM_WORLD_RANK": "1",
        "OMPI_COMM_WORLD_SIZE": "4",
        "OMPI_COMM_WORLD_LOCAL_RANK": "1",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
    },
    "mpirun (hydra)": {"PMI_RANK": "1", "PMI_SIZE": "4", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"},
}


@pytest.mark.parametrize("launcher", RANK_VARIABLES)
def test_every_launchers_variables_give_the_same_place(launcher):
    variables = rank_env.torch_variables(RANK_VARIABLES[launcher], 4, "10.0.0.5:29500")
    assert variables == {
        "RANK": "1",
        "WORLD_SIZE": "4",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "2",
        "GROUP_RANK": "0",
        "GDSBENCH_LAUNCHER": launcher,
        "MASTER_ADDR": "10.0.0.5",
        "MASTER_PORT": "29500",
    }


def test_a_kubernetes_indexed_job_is_one_rank_per_pod_and_keeps_its_own_rendezvous():
    env = {"JOB_COMPLETION_INDEX": "3", "MASTER_ADDR": "ckpt-0.ckpt", "MASTER_PORT": "29500"}
    variables = rank_env.torch_variables(env, 8, ":29400")
    assert (variables["RANK"], variables["WORLD_SIZE"], variables["GROUP_RANK"]) == ("3", "8", "3")
    assert "MASTER_ADDR" not in variables  # the manifest's service name stands


def test_torchruns_variables_win_over_the_allocation_it_runs_in():
    env = {
        **RANK_VARIABLES["srun"],
        "RANK": "3",
        "WORLD_SIZE": "4",
        "LOCAL_RANK": "1",
        "GROUP_RANK": "1",
        "LOCAL_WORLD_SIZE": "2",
    }
    assert rank_env.place(env, 4) == rank_env.Place(3, 4, 1, 2, 1, "torchrun")


def test_a_lone_process_is_rank_0_of_1_and_the_srun_rendezvous_asks_for_the_first_node():
    assert rank_env.place({}, 1) == rank_env.Place(0, 1, 0, 1, 0, "none")
    variables = rank_env.torch_variables(RANK_VARIABLES["srun"], 4, ":29500", first_node=lambda: "127.0.0.1")
    assert (variables["MASTER_ADDR"], variables["MASTER_PORT"]) == ("127.0.0.1", "29500")


@pytest.mark.parametrize(
    ("env", "world_size", "said"),
    [
        ({}, 2, "the case says world_size=2, none started 1 ranks"),
        (RANK_VARIABLES["mpirun"], 2, "the case says world_size=2, mpirun started 4 ranks"),
        ({**RANK_VARIABLES["srun"], "SLURM_PROCID": "-1"}, 4, "SLURM_PROCID='-1': expected a non-negative integer"),
        ({**RANK_VARIABLES["srun"], "SLURM_PROCID": "9"}, 4, "srun: rank 9 of 4, local 1 of 2: out of range"),
        ({**RANK_VARIABLES["srun"], "SLURM_STEP_TASKS_PER_NODE": "2(x"}, 4, "expected counts such as 2(x3),1"),
        ({**RANK_VARIABLES["srun"], "SLURM_NODEID": "2"}, 4, "SLURM_STEP_TASKS_PER_NODE='2(x2)' names no node 2"),
    ],
)
def test_variables_that_contradict_the_case_or_themselves_are_named(env, world_size, said):
    with pytest.raises(rank_env.RankEnvError, match=None) as caught:
        rank_env.place(env, world_size)
    assert said in str(caught.value)


def test_a_rendezvous_without_a_port_or_a_host_is_refused():
    with pytest.raises(rank_env.RankEnvError, match="expected HOST:PORT"):
        rank_env.torch_variables({}, 1, "node0")
    with pytest.raises(rank_env.RankEnvError, match="expected HOST:PORT"):
        rank_env.torch_variables({}, 1, "node0:70000")
    with pytest.raises(rank_env.RankEnvError, match="no launcher names the first node"):
        rank_env.torch_variables({}, 1, ":29500")
    with pytest.raises(rank_env.RankEnvError, match="outside a Slurm step"):
        rank_env.slurm_first_node({})


def test_slurms_compressed_layout_is_read_without_expanding_it():
    assert rank_env.slurm_tasks_on_node("2(x99999999999999),1", 99999999999999) == 1  # a MemoryError before
    with pytest.raises(rank_env.RankEnvError, match="expected a non-negative integer"):
        rank_env.place({**RANK_VARIABLES["srun"], "SLURM_NTASKS": "9" * 5000}, 4)  # int()'s digit limit before


@given(st.lists(st.integers(1, 64), min_size=1, max_size=12))
def test_slurms_tasks_per_node_reads_back_any_layout(counts):
    runs: list[tuple[int, int]] = []
    for count in counts:  # Slurm's compressed form: equal neighbours as N(xK)
        runs = [*runs[:-1], (count, runs[-1][1] + 1)] if runs and runs[-1][0] == count else [*runs, (count, 1)]
    spec = ",".join(f"{n}(x{k})" if k > 1 else str(n) for n, k in runs)
    assert [rank_env.slurm_tasks_on_node(spec, node) for node in range(len(counts))] == counts


def test_the_launcher_setting_is_a_name_or_a_mapping():
    assert launchers.parse("srun") == Launch("srun")
    assert launchers.parse({"name": "mpirun", "hosts": ["node0", "10.0.0.6"]}) == Launch(
        "mpirun", 2, ("node0", "10.0.0.6")
    )
    assert launchers.parse({"name": "srun", "nodes": 4, "partition": "gpu", "port": 29500}).record() == {
        "name": "srun",
        "nodes": 4,
        "hosts": [],
        "port": 29500,
        "partition": "gpu",
    }


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("pdsh", "launcher.name: expected one of local, torchrun, srun, mpirun (got 'pdsh')"),
        ({"name": ["srun"]}, "launcher.name: expected one of local, torchrun, srun, mpirun (got ['srun'])"),
        ({"name": {"srun": 1}}, "launcher.name: expected one of"),
        ({"name": "srun", "hosts": ["a"]}, "launcher.hosts: expected a list of hosts (for torchrun, mpirun)"),
        ({"name": "mpirun", "hosts": ["-oProxyCommand=sh"]}, "launcher.hosts[0]: expected a host name or an IP"),
        ({"name": "mpirun", "hosts": ["a b"]}, "launcher.hosts[0]: expected a host name"),
        ({"name": "torchrun", "hosts": ["a", "b"], "nodes": 3}, "launcher.nodes: expected the number of hosts (2)"),
        ({"name": "srun", "nodes": 0}, "launcher.nodes: expected a positive integer"),
        ({"name": "srun", "port": 70000}, "launcher.port: expected a TCP port"),
        ({"name": "srun", "partition": "--uid=0"}, "launcher.partition: expected a Slurm partition's name"),
        ({"name": "srun", "args": ["--task-prolog=/tmp/x"]}, "launcher.args: expected one of name, nodes, hosts"),
        (["srun"], "launcher: expected a launcher's name or a mapping"),
    ],
)
def test_a_bad_launcher_setting_is_a_config_error_naming_it(value, said):
    with pytest.raises(ConfigError) as caught:
        config.from_dict({"launcher": value, "matrix": {"engine": ["dcp"], "pattern": ["save"]}}, "c.yaml")
    assert str(caught.value).startswith(f"c.yaml: {said}")


def test_the_command_lines_launcher_replaces_the_configs_name_only():
    matrix = {"engine": ["dcp"], "pattern": ["save"]}
    swept = config.from_dict({"launcher": {"name": "torchrun", "nodes": 2}, "matrix": matrix}, "c.yaml")
    assert config.with_launcher(swept, "srun").launch == Launch("srun", 2)
    with pytest.raises(UsageError, match=r"--launcher\.name: expected one of"):
        config.with_launcher(swept, "ssh")


def test_each_launcher_starts_every_rank_of_the_case():
    [srun] = launchers.get("srun").commands(Launch("srun", 2, partition="gpu"), 8, PROGRAM, 29500)
    assert srun[:8] == [
        "srun",
        "--nodes=2",
        "--ntasks=8",
        "--ntasks-per-node=4",
        "--kill-on-bad-exit=1",
        "--immediate=30",
        "--export=ALL",
        "--partition=gpu",
    ]
    assert srun[8:] == [*PROGRAM.argv(), "--rendezvous", ":29500"]
    [mpirun] = launchers.get("mpirun").commands(Launch("mpirun", 2, ("n0", "fd00::2")), 4, PROGRAM, 29500)
    assert mpirun[mpirun.index("--host") + 1] == "n0:2,fd00::2:2" and mpirun[-2:] == ["--rendezvous", "n0:29500"]
    assert ("--allow-run-as-root" in mpirun) == (os.geteuid() == 0)


def test_torchrun_starts_one_launcher_per_node_and_reaches_others_through_ssh():
    here, there = launchers.get("torchrun").commands(Launch("torchrun", 2, ("127.0.0.1", "node1")), 4, PROGRAM, 29500)
    assert here[:3] == ["/venv/bin/python", "-m", "torch.distributed.run"] and "--nproc-per-node=2" in here
    assert "--rdzv-endpoint=127.0.0.1:29500" in here and here[-3:] == ["gdsbench.cli_rank", *PROGRAM.args]
    assert "--rdzv-backend=static" in here and "--node-rank=0" in here  # node 0's agent binds the port, or fails
    assert there[:4] == ["ssh", "-o", "BatchMode=yes", "node1"]
    read, remote = there[4].split(" && exec ", 1)  # the secret from ssh's standard input, never an argument
    assert read == "IFS= read -r GDSBENCH_RENDEZVOUS_SECRET && export GDSBENCH_RENDEZVOUS_SECRET"
    assert shlex.split(remote) == [arg.replace("--node-rank=0", "--node-rank=1") for arg in here]
    assert launchers.get("torchrun").needs(Launch("torchrun", 2)) is None  # local nodes: no ssh


def test_a_case_that_cannot_start_says_why():
    assert launchers.get("srun").unavailable(Launch("srun", 3), 4) == (
        "launcher srun: world_size 4 does not split evenly over 3 nodes"
    )
    assert launchers.get("local").unavailable(Launch(), 3) is None


def test_mpirun_refuses_two_names_of_one_machine_as_two_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Open MPI counts every name of a machine once, so [127.0.0.1, localhost] would fail with its ppr banner:
    the case is skipped first, naming the two and what gives two nodes on one host."""
    mpirun = launchers.get("mpirun")
    monkeypatch.setattr("shutil.which", lambda tool: f"/usr/bin/{tool}")  # the tool's presence is not the point
    said = mpirun.unavailable(Launch("mpirun", 2, ("127.0.0.1", "localhost")), 2)
    assert said is not None and "hosts 127.0.0.1 and localhost are one machine" in said and "torchrun" in said
    assert mpirun.unavailable(Launch("mpirun", 1, ("localhost",)), 2) is None


def test_a_distributed_engine_s_case_asks_its_launcher_too(tmp_path: Path) -> None:
    """dcp and dcp_fast declare reasons of their own (codecs, O_DIRECT) and still get the launcher's: a world size
    that does not split over the nodes is a skipped row naming it, for every distributed engine."""
    from gdsbench import runners
    from gdsbench.runners.base import RunContext

    ctx = RunContext(directory=tmp_path, file_size=1 << 20, launch=Launch("torchrun", 2))
    for engine in ("dcp", "dcp_fast", "torch_save_ranks"):
        case = config.from_dict(
            {"directory": str(tmp_path), "matrix": {"engine": [engine], "pattern": ["save"], "world_size": [3]}},
            "t.yaml",
        ).cases[0]
        assert runners.get(engine).unavailable(case, ctx) == (
            "launcher torchrun: world_size 3 does not split evenly over 2 nodes"
        ), engine


@pytest.mark.parametrize(
    ("recorded", "cause"),
    [
        ("ppr-conflict", "Your job has requested more processes than the ppr for this topology can support:"),
        ("not-enough-slots", "There are not enough slots available in the system to satisfy the 4 slots"),
    ],
)
def test_an_mpirun_failure_keeps_its_cause_not_only_its_closing_line(recorded: str, cause: str) -> None:
    """Open MPI's real output (tests/data/mpirun): the row's error starts with the banner's cause; it said only
    "Please revise the conflict and try again." before (issue 43)."""
    stderr = (Path(__file__).parent / "data" / "mpirun" / f"{recorded}.stderr").read_text()
    said = launchers.get("mpirun").failure(stderr, 1)
    assert said.startswith(cause) and "Please revise" not in said, said
    ours = stderr + "gdsbench.cli_rank: rank 1 of 2: joining at 10.0.0.5:29500 failed: timed out\n"
    assert "gdsbench.cli_rank: rank 1 of 2" in launchers.get("mpirun").failure(ours, 1)
