"""Optimizer benchmark: planning time in process (bundled catalog and a synthetic 50,000-offer
catalog) and as a whole `gpulease plan` CLI run, against a bare `python -c pass` start measured in
the same run.

    python benchmarks/optimizer/run.py [--repeat 20] [--offers 50000] [--json results.json]

Prints a Markdown table (the one in benchmarks/README.md). Targets: < 50 ms in process for 50k
offers; < 0.5 s for the whole `gpulease plan` command.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ["finetune-7b", "pretrain-1.3b-spot", "serve-70b", "resnet50-imagenet"]


def _median_ms(fn: object, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def in_process(repeat: int, offers: int) -> list[dict[str, object]]:
    import numpy as np

    from gpulease.catalog import Catalog
    from gpulease.optimizer import plan_all
    from gpulease.spec import load_task

    bundled = Catalog.load(bundled_only=True)
    synthetic = Catalog.synthetic(offers, seed=0)

    def cheapest_hourly(catalog: Catalog) -> int:
        """The baseline: what a price-only picker does (cheapest on-demand $/GPU-h, 1-hour job;
        CPU-only offers have no GPU to price)."""
        gpus = catalog.offers.gpu_count
        price = np.where(gpus > 0, catalog.offers.price_on_demand / np.maximum(gpus, 1), np.nan)
        return int(np.nanargmin(price))

    rows = []
    for name in EXAMPLES:
        task = load_task(ROOT / "examples" / f"{name}.yaml")
        for label, catalog in (("bundled", bundled), (f"synthetic {offers:,}", synthetic)):
            plan_all(task, catalog=catalog, config={})  # warm caches
            ms = _median_ms(lambda t=task, c=catalog: plan_all(t, catalog=c, config={}), repeat)
            base = _median_ms(lambda c=catalog: cheapest_hourly(c), repeat)
            rows.append(
                {
                    "example": name,
                    "catalog": label,
                    "offers": len(catalog.offers),
                    "median_ms": round(ms, 2),
                    "baseline_ms": round(base, 3),
                    "x_baseline": round(ms / base, 1),
                }
            )
    return rows


def whole_cli(repeat: int) -> list[dict[str, object]]:
    exe = Path(sys.executable).parent / "gpulease"
    baseline = _median_ms(
        lambda: subprocess.run([sys.executable, "-c", "pass"], check=True), repeat
    )
    rows = [{"command": "python -c pass (baseline)", "median_ms": round(baseline, 1)}]
    for name in EXAMPLES:
        cmd = [str(exe), "plan", str(ROOT / "examples" / f"{name}.yaml"), "--json"]
        ms = _median_ms(lambda c=cmd: subprocess.run(c, check=True, capture_output=True), repeat)
        rows.append(
            {
                "command": f"gpulease plan examples/{name}.yaml --json",
                "median_ms": round(ms, 1),
                "x_baseline": round(ms / baseline, 1),
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--cli-repeat", type=int, default=7)
    parser.add_argument("--offers", type=int, default=50_000)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    process = in_process(args.repeat, args.offers)
    cli = whole_cli(args.cli_repeat)
    print(
        "| example | catalog | offers | plan_all median (ms) | cheapest-hourly baseline (ms) "
        "| × baseline |\n|---|---|---:|---:|---:|---:|"
    )
    for r in process:
        print(
            f"| {r['example']} | {r['catalog']} | {r['offers']} | {r['median_ms']} | "
            f"{r['baseline_ms']} | {r['x_baseline']} |"
        )
    print("\n| command | median (ms) | × baseline |\n|---|---:|---:|")
    for r in cli:
        print(f"| `{r['command']}` | {r['median_ms']} | {r.get('x_baseline', 1.0)} |")
    if args.json:
        args.json.write_text(json.dumps({"in_process": process, "cli": cli}, indent=2))


if __name__ == "__main__":
    main()
