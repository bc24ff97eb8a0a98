"""The environment a job sees on its node.

Layers, later ones winning: the agent's own environment (on the local provider that carries
``CUDA_VISIBLE_DEVICES`` for the node's fake GPUs) with the task environment's ``bin`` (see
:mod:`gpulease.agent.venvs`: ``python``, ``pip`` and ``torchrun`` of a venv that sees the agent's
packages and takes what ``pip install`` adds) and then the agent's own Python environment's
``bin`` first on ``PATH`` and ``VIRTUAL_ENV`` naming the task environment,
``PYTHONUNBUFFERED=1`` (so Python output reaches the log at once; a task may override it), the
task's ``envs``, then the node variables below, which a task cannot override.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from gpulease.wire import NODE_VARIABLES, NodeTask

__all__ = ["NODE_VARIABLES", "container_env", "job_env", "node_env"]


def node_env(
    sub: NodeTask,
    *,
    work_dir: Path,
    checkpoint_dir: Path,
    preemption_file: Path,
    train_stats_file: Path | None = None,
) -> dict[str, str]:
    """The variables every node of a task gets (torchrun's names included). The two files are
    the agent↔job base protocol (docs/agent.md): the agent touches ``GPULEASE_PREEMPTION_FILE``
    before its SIGTERM; ``gpulease.train`` writes its figures to ``GPULEASE_TRAIN_STATS_FILE``.
    ``GPULEASE_ACCELERATOR`` is the accelerator the cluster rented (empty when not known)."""
    stats = train_stats_file or preemption_file.with_name("train.json")
    return {
        "GPULEASE_NODE_RANK": str(sub.node_rank),
        "GPULEASE_NUM_NODES": str(sub.num_nodes),
        "GPULEASE_NODE_IPS": "\n".join(sub.node_ips),
        "GPULEASE_GPUS_PER_NODE": str(sub.gpus_per_node),
        "GPULEASE_TASK_ID": sub.task_id,
        "GPULEASE_CHECKPOINT_DIR": str(checkpoint_dir),
        "GPULEASE_PREEMPTION_FILE": str(preemption_file),
        "GPULEASE_TRAIN_STATS_FILE": str(stats),
        "GPULEASE_ACCELERATOR": sub.accelerator or "",
        "GPULEASE_WORK_DIR": str(work_dir),
        "MASTER_ADDR": sub.node_ips[0],
        "MASTER_PORT": str(sub.effective_master_port()),
        "NODE_RANK": str(sub.node_rank),
        "NNODES": str(sub.num_nodes),
    }


def job_env(
    base: Mapping[str, str],
    sub: NodeTask,
    *,
    work_dir: Path,
    checkpoint_dir: Path,
    preemption_file: Path,
    venv: Path | None = None,
    train_stats_file: Path | None = None,
) -> dict[str, str]:
    """The job's environment; ``venv`` is the task environment (None: the agent's Python
    environment itself, first on ``PATH``)."""
    env = {k: v for k, v in base.items() if not k.startswith("GPULEASE_AGENT_")}
    env["PATH"] = _python_first(env.get("PATH", os.defpath), venv)
    if venv is not None:
        env["VIRTUAL_ENV"] = str(venv)
        env.pop("PYTHONHOME", None)  # it would point the venv's python elsewhere
    return _with_task_layers(env, sub, node_env(sub, work_dir=work_dir,
                             checkpoint_dir=checkpoint_dir, preemption_file=preemption_file,
                             train_stats_file=train_stats_file))  # fmt: skip


# what a container of the task gets from the agent's own environment (the local provider's
# fake GPUs; a real node's CUDA_VISIBLE_DEVICES, when it sets one)
CONTAINER_PASSED = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")


def container_env(
    base: Mapping[str, str],
    sub: NodeTask,
    *,
    work_dir: Path,
    checkpoint_dir: Path,
    preemption_file: Path,
    train_stats_file: Path | None = None,
) -> dict[str, str]:
    """The environment of a task's container (a task with an image): the layers of
    :func:`job_env` without the node's own ``PATH``, ``HOME`` and Python environment (the image
    has its own), so ``PYTHONUNBUFFERED=1``, :data:`CONTAINER_PASSED` from ``base``, the task's
    ``envs``, then the node variables."""
    env = {k: base[k] for k in CONTAINER_PASSED if k in base}
    return _with_task_layers(env, sub, node_env(sub, work_dir=work_dir,
                             checkpoint_dir=checkpoint_dir, preemption_file=preemption_file,
                             train_stats_file=train_stats_file))  # fmt: skip


def _with_task_layers(
    env: dict[str, str], sub: NodeTask, node: Mapping[str, str]
) -> dict[str, str]:
    """``env`` with the layers every task environment ends with: ``PYTHONUNBUFFERED=1``, the
    task's ``envs``, then the node variables ``node`` (which a task cannot override)."""
    env["PYTHONUNBUFFERED"] = "1"
    env.update(sub.envs)
    env.update(node)
    return env


def _python_first(path: str, venv: Path | None = None) -> str:
    """``path`` with the task environment's ``bin`` and the directory of the agent's Python (its
    venv's ``bin``, for ``gpulease`` and the other scripts installed there) in front."""
    first = [str(venv / "bin")] if venv is not None else []
    first.append(str(Path(sys.executable).parent))
    rest = [p for p in path.split(os.pathsep) if p and p not in first]
    return os.pathsep.join([*first, *rest])
