"""The price threshold and the budget guard of managed jobs, through the CLI on the sim provider
(its spot prices follow ``spot_price_changes`` on its scaled clock): when the spot price where the
job runs passes ``spot_price_ratio`` × on-demand, the job is asked to checkpoint and stop and
moves to the cheapest acceptable offer (here on-demand, every spot offer being too dear); a job
whose spend would pass its budget stops and FAILS saying so."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.conftest import Cli, configure_sim, show_job, stop_server_and_sim_nodes


@pytest.fixture
def pricey(cli: Cli) -> Iterator[Cli]:
    """Spot prices ×5 from 0.15 sim hours (9 s) on, at 60× real time."""
    yield configure_sim(cli, "    time_scale: 60\n    provision_seconds: [0, 10]\n"
                     "    spot_price_changes: [[0.15, 5.0]]\n")  # fmt: skip
    stop_server_and_sim_nodes(cli)


@pytest.fixture
def hourly(cli: Cli) -> Iterator[Cli]:
    """One simulated hour per real second."""
    yield configure_sim(cli, "    time_scale: 3600\n    provision_seconds: [60, 60]\n")
    stop_server_and_sim_nodes(cli)


@pytest.mark.slow
def test_the_spot_price_passing_the_limit_moves_the_job(pricey: Cli, tmp_path: Path) -> None:
    task = tmp_path / "t.yaml"
    task.write_text(
        "name: pricey\nresources:\n  accelerators: T4:1\n  use_spot: auto\n"
        "  spot_price_ratio: 0.5\n"
        "run: |\n  trap 'echo stopping; exit 75' TERM\n"
        "  for i in $(seq 1 250); do sleep 0.1; done\n"
    )
    out = pricey("jobs", "launch", str(task), "--provider", "sim")
    assert out.returncode == 0, out.stderr
    view = show_job(pricey)
    assert view["status"] == "succeeded"
    kinds = [e["kind"] for e in view["events"]]
    assert "stop:price" in kinds and "price" in kinds, view["events"]
    stop = next(e for e in view["events"] if e["kind"] == "stop:price")
    assert "passed the limit" in stop["detail"]
    assert [a["pricing"] for a in view["attempts"]] == ["spot", "on_demand"]
    assert view["blocked"], "the dear zone cools down"


@pytest.mark.slow
def test_the_budget_guard_stops_the_job_before_it_overspends(hourly: Cli, tmp_path: Path) -> None:
    task = tmp_path / "b.yaml"
    task.write_text(
        "name: capped\nresources:\n  accelerators: T4:1\nbudget: $2\n"
        "run: |\n  trap 'echo checkpoint taken; exit 75' TERM\n"
        "  for i in $(seq 1 600); do sleep 0.1; done\n"
    )
    out = hourly("jobs", "launch", str(task), "--provider", "sim")
    assert out.returncode == 1, out.stderr
    view = show_job(hourly)
    assert view["status"] == "failed" and view["failure"] == "budget", view
    assert "budget: spent $" in view["reason"] and "stopped with a checkpoint" in view["reason"]
    assert "checkpoint taken" in out.stdout
    spent = view["cost"]["spent_usd"]
    price = 0.526  # the sim's cheapest T4 on an x86_64 host, on demand (g4dn.xlarge), $/h
    assert 2.0 - price <= spent <= 2.0 + price  # stopped within about one hour of the budget
