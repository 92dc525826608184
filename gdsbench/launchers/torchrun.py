"""torchrun across nodes: one torchrun per node, all meeting at the first node's store (torch's static rendezvous:
the first node's agent binds the port itself, or fails naming it, and nothing is unpickled from the store; the c10d
backend would fall back to a client of whatever holds the port and unpickle its state). A node named 127.0.0.1,
localhost or this host's name starts here; any other through ssh (BatchMode: a key, never a password prompt), its
command quoted for the remote shell, which reads the launch's secret from its standard input (never an argument)."""

from __future__ import annotations

import re
import shlex

from gdsbench.launchers.base import SECRET_VARIABLE, Launch, Launcher, Program, is_local, port_held, run_id

TORCHRUN = "torch.distributed.run"
ROOT_CAUSE = "Root Cause (first observed failure):"  # torchrun's failure summary
#: What a node reached through ssh runs before its torchrun: the launch's secret, read from ssh's standard input.
READ_SECRET = f"IFS= read -r {SECRET_VARIABLE} && export {SECRET_VARIABLE} && exec "


class Torchrun(Launcher):
    name = "torchrun"
    summary = "torchrun on every node (hosts:, or `nodes` local ones), meeting at a c10d rendezvous on the first"
    tool = "ssh"
    takes_hosts = True

    def needs(self, launch: Launch) -> str | None:
        """ssh, only where a node is not this machine."""
        return None if all(is_local(host) for host in launch.hosts) else "ssh"

    def failure(self, stderr: str, returncode: int) -> str:
        """torchrun's root cause and the failed rank's last error line."""
        return launcher_failure(stderr, returncode)

    def commands(self, launch: Launch, world_size: int, program: Program, port: int) -> list[list[str]]:
        """One torchrun per node (its node rank: its place in `hosts`); ssh for the nodes elsewhere."""
        first, rdzv = self.first_host(launch), run_id()
        hosts = launch.hosts or ("127.0.0.1",) * launch.nodes
        endpoint, per_node = f"{bracketed(first)}:{port}", world_size // launch.nodes
        argvs = [node_command(program, launch.nodes, per_node, endpoint, rdzv, node) for node in range(len(hosts))]
        return [
            argv if is_local(host) else ["ssh", "-o", "BatchMode=yes", host, READ_SECRET + shlex.join(argv)]
            for host, argv in zip(hosts, argvs)
        ]


def launcher_failure(stderr: str, returncode: int) -> str:
    """Why torchrun's ranks failed, from its output: the root cause it names (rank, exit code or signal) and that
    rank's last error line (`[rank1]: RuntimeError: ...`), not the banner of `=` signs its output ends with."""
    lines = [line.strip() for line in stderr.splitlines()]
    held = port_held(lines)
    if held:
        return held
    root = "\n".join(lines[lines.index(ROOT_CAUSE) :]) if ROOT_CAUSE in lines else ""
    fields = dict(re.findall(r"^(rank|exitcode)\s*:\s*(.+?)\s*$", root, re.MULTILINE))
    rank = fields.get("rank", "").split(" ")[0]
    error_line = r"\[rank" + (rank or r"\d+") + r"\]:\s*[\w.]*(Error|Exception)\b"
    errors = [line for line in lines if re.match(error_line, line)]
    cause = f"rank {rank} exited {fields['exitcode']}" if "exitcode" in fields else ""
    telling = [*errors[-1:], cause]
    if not any(telling):
        telling = [next((line for line in reversed(lines) if line.strip("=-")), "")]
    return "; ".join(filter(None, telling)) or f"torchrun exited {returncode}"


def node_command(program: Program, nodes: int, per_node: int, endpoint: str, rdzv: str, node: int = 0) -> list[str]:
    """torchrun's command on node `node`: `per_node` ranks of `program`, of `nodes` nodes meeting at `endpoint`
    (node 0's agent binds it)."""
    return [
        program.python,
        "-m",
        TORCHRUN,
        f"--nnodes={nodes}",
        f"--nproc-per-node={per_node}",
        "--rdzv-backend=static",
        f"--rdzv-endpoint={endpoint}",
        f"--node-rank={node}",
        f"--rdzv-id={rdzv}",
        "--max-restarts=0",
        "-m",
        program.module,
        *program.args,
    ]


def bracketed(host: str) -> str:
    """An IPv6 address in brackets for HOST:PORT."""
    return f"[{host}]" if ":" in host else host


LAUNCHER = Torchrun()
