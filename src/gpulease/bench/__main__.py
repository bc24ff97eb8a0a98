"""``python -m gpulease.bench``: the bench on this node, its argv mapped one to one onto
:class:`~gpulease.bench.options.BenchOptions`::

    python -m gpulease.bench [--quick] [--json] [--only a,b] [--workdir D] [--store URL]
        [--accelerator A] [--gpus N] [--gpu-memory-gb G] [--interconnect nvlink|pcie]
        [--instance-type T] [--rendezvous HOST:PORT --rank R --world N] [--node NAME]

Prints a table of the checks; with ``--json`` its last stdout line is the report's marker line
(``GPULEASE-BENCH-REPORT {json}``, what the agent relays to the server). The exit code is 0
whenever the bench ran, even when a check fails (the verdict is in the report); 2 for bad
arguments, with a message naming the option.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from gpulease.bench.options import FAMILIES, BenchOptions, Expected, Rendezvous, known_families
from gpulease.bench.report import BenchReport

INTERCONNECTS = ("nvlink", "pcie")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message}\n")


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m gpulease.bench", description="Benchmark this node.")
    p.add_argument("--quick", action="store_true", help="the acceptance subset, smaller sizes")
    p.add_argument("--json", action="store_true", help="end with the report's marker line")
    p.add_argument("--only", help=f"families, comma-separated, of: {','.join(FAMILIES)}")
    p.add_argument("--workdir", type=Path, default=Path("."), help="where the disk checks write")
    p.add_argument("--store", help="checkpoint store URL whose reads store.read measures")
    p.add_argument("--accelerator", help="the accelerator the offer sold (H100, H100-SXM)")
    p.add_argument("--gpus", type=int, help="GPUs the offer sold")
    p.add_argument("--gpu-memory-gb", type=float, help="memory per GPU the offer sold")
    p.add_argument("--interconnect", choices=INTERCONNECTS, help="GPU-to-GPU link sold")
    p.add_argument("--instance-type", help="the instance type (for history)")
    p.add_argument("--rendezvous", help="HOST:PORT where the cluster's nodes meet")
    p.add_argument("--rank", type=int, help="this node's rank (with --rendezvous)")
    p.add_argument("--world", type=int, help="the number of nodes (with --rendezvous)")
    p.add_argument("--node", help="the report's node name (default: the host name)")
    return p


class BadOption(ValueError):
    """A bad value of one option (its message names it)."""


def _only(value: str | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    try:
        return known_families(value.split(","))
    except ValueError as exc:
        raise BadOption(str(exc)) from None


def _rendezvous(args: argparse.Namespace) -> Rendezvous | None:
    if args.rendezvous is None:
        if args.rank is not None or args.world is not None:
            raise BadOption("--rank/--world: only with --rendezvous HOST:PORT")
        return None
    host, _, port = str(args.rendezvous).rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise BadOption(f"--rendezvous: {args.rendezvous!r} is not HOST:PORT")
    if args.world is None or args.world < 1:
        raise BadOption("--world: the number of nodes (at least 1) is needed with --rendezvous")
    if args.rank is None or not 0 <= args.rank < args.world:
        raise BadOption(f"--rank: needs 0 <= rank < --world ({args.world})")
    return Rendezvous(host.strip("[]"), int(port), args.rank, args.world)


def _accelerator(value: str | None) -> str | None:
    """The sold accelerator as given; one the datasheet does not know is kept (its checks then
    have no datasheet reference, and say so) — a new part must not stop the bench."""
    if value is None:
        return None
    if not value.strip():
        raise BadOption("--accelerator: empty")
    return value.strip()


def _store(value: str | None) -> str | None:
    if value is None:
        return None
    scheme = value.split("://", 1)[0] if "://" in value else "path"
    if scheme not in ("local", "s3", "path") or value in ("local://", "s3://"):
        raise BadOption(f"--store: {value!r} is not a store URL (local://PATH, a path or "
                        "s3://BUCKET/PREFIX)")  # fmt: skip
    return value


def options_from(argv: Sequence[str] | None = None) -> tuple[BenchOptions, bool]:
    """The options of ``argv`` and whether ``--json`` was given (SystemExit 2 when bad)."""
    args = parser().parse_args(argv)
    try:
        if args.gpus is not None and args.gpus < 0:
            raise BadOption("--gpus: must be 0 or more")
        if args.gpu_memory_gb is not None and args.gpu_memory_gb <= 0:
            raise BadOption("--gpu-memory-gb: must be positive")
        if not args.workdir.is_dir():
            raise BadOption(f"--workdir: {args.workdir} is not a directory")
        expected = Expected(_accelerator(args.accelerator), args.gpus, args.gpu_memory_gb,
                            args.interconnect, args.instance_type)  # fmt: skip
        options = BenchOptions(quick=args.quick, only=_only(args.only), workdir=args.workdir,
                               store=_store(args.store), expected=expected,
                               rendezvous=_rendezvous(args), node=args.node)  # fmt: skip
    except BadOption as exc:
        print(f"python -m gpulease.bench: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    return options, bool(args.json)


def _figure(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:,.3g}" if abs(value) < 100 else f"{value:,.0f}"


def print_table(report: BenchReport) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 160)
    table = Table(title=f"gpulease bench — {report.node} ({report.device}, "
                  f"{report.accelerator or 'no accelerator'} × {report.gpu_count}), "
                  f"{report.wall_s:.1f} s: {report.verdict}")  # fmt: skip
    for column in ("check", "figure", "unit", "reference", "source", "ratio", "verdict", "detail"):
        table.add_column(column, justify="right" if column in ("figure", "reference", "ratio")
                         else "left", overflow="fold")  # fmt: skip
    for c in report.checks:
        ratio = f"{c.ratio:.2f}" if c.ratio is not None else "—"
        table.add_row(c.name, _figure(c.figure), c.unit, _figure(c.reference),
                      c.reference_source or "", ratio, c.verdict, c.detail)  # fmt: skip
    console.print(table)


def main(argv: Sequence[str] | None = None) -> int:
    from gpulease.bench.runner import run_bench

    options, as_json = options_from(argv)
    report = run_bench(options)
    print_table(report)
    if as_json:
        sys.stdout.flush()
        print(report.marker_line(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
