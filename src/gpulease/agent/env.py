"""The environment a job sees on its node.

Layers, later ones winning: the agent's own environment (on the local provider that carries
``CUDA_VISIBLE_DEVICES`` for the node's fake GPUs) with the agent's Python environment first on
``PATH`` (so ``python``, ``pip`` and ``torchrun`` in a task are the ones gpulease runs under, venv
or not), ``PYTHONUNBUFFERED=1`` (so Python output reaches the log at once; a task may override
it), the task's ``envs``, then the node variables below, which a task cannot override.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from gpulease.agent.api import TaskSubmission

NODE_VARIABLES = (
    "GPULEASE_NODE_RANK",
    "GPULEASE_NUM_NODES",
    "GPULEASE_NODE_IPS",
    "GPULEASE_GPUS_PER_NODE",
    "GPULEASE_TASK_ID",
    "GPULEASE_CHECKPOINT_DIR",
    "GPULEASE_PREEMPTION_FILE",
    "GPULEASE_WORK_DIR",
    "MASTER_ADDR",
    "MASTER_PORT",
    "NODE_RANK",
    "NNODES",
)


def node_env(
    sub: TaskSubmission, *, work_dir: Path, checkpoint_dir: Path, preemption_file: Path
) -> dict[str, str]:
    """The variables every node of a task gets (torchrun's names included)."""
    return {
        "GPULEASE_NODE_RANK": str(sub.node_rank),
        "GPULEASE_NUM_NODES": str(sub.num_nodes),
        "GPULEASE_NODE_IPS": "\n".join(sub.node_ips),
        "GPULEASE_GPUS_PER_NODE": str(sub.gpus_per_node),
        "GPULEASE_TASK_ID": sub.task_id,
        "GPULEASE_CHECKPOINT_DIR": str(checkpoint_dir),
        "GPULEASE_PREEMPTION_FILE": str(preemption_file),
        "GPULEASE_WORK_DIR": str(work_dir),
        "MASTER_ADDR": sub.node_ips[0],
        "MASTER_PORT": str(sub.effective_master_port()),
        "NODE_RANK": str(sub.node_rank),
        "NNODES": str(sub.num_nodes),
    }


def job_env(
    base: Mapping[str, str],
    sub: TaskSubmission,
    *,
    work_dir: Path,
    checkpoint_dir: Path,
    preemption_file: Path,
) -> dict[str, str]:
    env = {k: v for k, v in base.items() if not k.startswith("GPULEASE_AGENT_")}
    env["PATH"] = _python_first(env.get("PATH", os.defpath))
    env["PYTHONUNBUFFERED"] = "1"
    env.update(sub.envs)
    env.update(
        node_env(
            sub, work_dir=work_dir, checkpoint_dir=checkpoint_dir, preemption_file=preemption_file
        )
    )
    return env


def _python_first(path: str) -> str:
    """``path`` with the directory of the agent's Python (its venv's ``bin``) in front."""
    bin_dir = str(Path(sys.executable).parent)
    rest = [p for p in path.split(os.pathsep) if p and p != bin_dir]
    return os.pathsep.join([bin_dir, *rest])
