"""What a bench run is asked to do (:class:`BenchOptions`): the contract between
``gpulease bench`` in process, ``python -m gpulease.bench`` (its argv maps onto it one to one,
see :mod:`gpulease.bench.__main__`) and the server that runs it on nodes. Plain data; pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

#: the check families, in the order a run measures them (``only`` picks among them)
FAMILIES = ("gpu", "matmul", "memory", "transfer", "allreduce", "net", "disk", "store", "train")
#: what ``quick`` (acceptance, target < 30 s on a 2-core CPU machine) runs
QUICK_FAMILIES = ("gpu", "matmul", "memory", "transfer", "allreduce", "net", "disk")


@dataclass(frozen=True, slots=True)
class Rendezvous:
    """Where the nodes of one cluster meet for the cross-node checks (``torch.distributed``
    with ``init_method=tcp://host:port``: gloo on CPUs, NCCL on GPUs)."""

    host: str
    port: int
    rank: int
    world: int


@dataclass(frozen=True, slots=True)
class Expected:
    """What the offer sold, to check the node against (None: not known, not checked)."""

    accelerator: str | None = None  # the catalog's name (``H100``); its spec gives the peaks
    gpu_count: int | None = None
    gpu_memory_gb: float | None = None
    interconnect: str | None = None  # nvlink | pcie
    instance_type: str | None = None


@dataclass(frozen=True, slots=True)
class BenchOptions:
    """``quick``: the acceptance subset, smaller sizes; ``only``: these families only (None:
    all, or the quick ones); ``workdir``: where the disk checks write (the task's work
    directory on a node; a temporary directory under it is removed after); ``store``: the
    checkpoint store URL whose reads ``store.read`` measures (None: skipped);
    ``rendezvous``: this node's place among the cluster's nodes (None: a single node)."""

    quick: bool = False
    only: tuple[str, ...] | None = None
    workdir: Path = Path(".")
    store: str | None = None
    expected: Expected = Expected()
    rendezvous: Rendezvous | None = None
    node: str | None = None  # the report's node name (default: this host's name)

    def families(self) -> tuple[str, ...]:
        wanted = self.only or (QUICK_FAMILIES if self.quick else FAMILIES)
        return tuple(f for f in FAMILIES if f in wanted)


def bench_argv(options: BenchOptions, *, python: str = "python") -> list[str]:
    """The ``python -m gpulease.bench --json`` command line that runs ``options`` on a node
    (:func:`gpulease.bench.__main__.options_from` reads it back into the same options): what
    the server's ``bench CLUSTER`` and acceptance on launch send to the agents."""
    args = [python, "-m", "gpulease.bench", "--json"]
    if options.quick:
        args.append("--quick")
    if options.only:
        args += ["--only", ",".join(options.only)]
    if options.node:
        args += ["--node", options.node]
    sold = options.expected
    flags: tuple[tuple[str, object], ...] = (
        ("--accelerator", sold.accelerator), ("--gpus", sold.gpu_count),
        ("--gpu-memory-gb", sold.gpu_memory_gb), ("--interconnect", sold.interconnect),
        ("--instance-type", sold.instance_type), ("--store", options.store),
    )  # fmt: skip
    for flag, value in flags:
        if value is not None:
            args += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    args += ["--workdir", str(options.workdir)]
    if options.rendezvous is not None:
        meet = options.rendezvous
        args += ["--rendezvous", f"{meet.host}:{meet.port}", "--rank", str(meet.rank),
                 "--world", str(meet.world)]  # fmt: skip
    return args


def known_families(names: Sequence[str], *, field: str = "--only") -> tuple[str, ...]:
    """``names`` (stripped, empty ones dropped) when every one is a check family; a ValueError
    naming ``field``, the unknown ones and the known ones otherwise (or when none is left)."""
    wanted = tuple(n.strip() for n in names if n.strip())
    unknown = [n for n in wanted if n not in FAMILIES]
    if unknown or not wanted:
        raise ValueError(f"{field}: unknown check families {', '.join(unknown) or '(none given)'};"
                         f" known: {', '.join(FAMILIES)}")  # fmt: skip
    return wanted
