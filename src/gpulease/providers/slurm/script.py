"""What a launch submits: the sbatch argv, the batch script and the per-node launcher.

One allocation of ``num_nodes`` nodes; the batch script runs
``srun --ntasks-per-node=1 bash node.sh``, so every node of the allocation runs one agent.
``node.sh`` picks its node dir from ``SLURM_NODEID`` under the request's dir (a directory every
node must see: on one machine the provider's root; on a real cluster a shared file system) and
execs ``python -m gpulease.agent serve`` with the token the provider wrote there, a port file
the agent writes once bound, and the venv root under the provider's root (task environments,
shared by every node and allocation that sees that root; see docs/agent.md). Pure functions:
nothing here runs a command.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from pathlib import Path

from gpulease.providers.base import LaunchRequest
from gpulease.providers.slurm.settings import SlurmSettings

JOB_PREFIX = "gpulease-"


def job_name(request_id: str) -> str:
    return f"{JOB_PREFIX}{request_id}"


def comment(request: LaunchRequest) -> str:
    """The job's ``--comment``: the request's tags and shape as compact JSON."""
    return json.dumps(
        {"tags": request.all_tags(), "nodes": request.num_nodes,
         "gpus_per_node": request.gpus_per_node, "instance_type": request.instance_type},
        separators=(",", ":"), sort_keys=True,
    )  # fmt: skip


def parse_comment(text: object) -> Mapping[str, object] | None:
    """The gpulease part of a job's comment (None: not one of ours)."""
    if not isinstance(text, str) or not text.startswith("{"):
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("tags"), dict):
        return None
    return data


def sbatch_argv(
    request: LaunchRequest, settings: SlurmSettings, request_dir: Path, partition: str | None
) -> list[str]:
    argv = [
        "sbatch", "--parsable", f"--job-name={job_name(request.request_id)}",
        f"--nodes={request.num_nodes}", "--ntasks-per-node=1", "--requeue",
        "--open-mode=append", f"--output={request_dir / 'slurm-%j.out'}",
        f"--chdir={request_dir}", f"--comment={comment(request)}",
    ]  # fmt: skip
    if request.gpus_per_node > 0:
        argv.append(f"--gpus-per-node={request.gpus_per_node}")
    if partition:
        argv.append(f"--partition={partition}")
    if settings.account:
        argv.append(f"--account={settings.account}")
    if settings.qos:
        argv.append(f"--qos={settings.qos}")
    argv.extend(settings.sbatch_options)
    argv.append(str(request_dir / "batch.sh"))
    return argv


def batch_script(request_dir: Path) -> str:
    node_sh = shlex.quote(str(request_dir / "node.sh"))
    return (
        "#!/bin/bash\n"
        "# gpulease: one agent per node of this allocation (see node.sh)\n"
        f"exec srun --ntasks-per-node=1 --kill-on-bad-exit=0 /bin/bash {node_sh}\n"
    )


def node_script(
    request_dir: Path, python: str, agent_host: str, venv_root: Path | None = None
) -> str:
    """Run on every node by srun: the node's agent, in ``node-$SLURM_NODEID``; its task
    environments under ``venv_root`` (None: the agent's default, inside the node dir)."""
    root = shlex.quote(str(request_dir))
    venvs = ["--venv-root", shlex.quote(str(venv_root))] if venv_root is not None else []
    serve = " ".join(
        [shlex.quote(python), "-m", "gpulease.agent", "serve", "--host", shlex.quote(agent_host),
         "--port", "0", "--port-file", '"$node/port"', "--token-file", '"$node/token"',
         "--node-dir", '"$node/node"', "--node-rank", '"$SLURM_NODEID"', *venvs]
    )  # fmt: skip
    return (
        "#!/bin/bash\n"
        "set -eu\n"
        f'node={root}/"node-$SLURM_NODEID"\n'
        'mkdir -p "$node/node"\n'
        'rm -f "$node/port"\n'
        'export GPULEASE_INSTANCE_ID="$SLURM_JOB_ID.$SLURM_NODEID"\n'
        f'exec {serve} >>"$node/agent.log" 2>&1\n'
    )
