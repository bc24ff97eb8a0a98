"""``gpulease spot-sim`` end to end on generated trace files: JSON fields, the table, window
selection (--start-ticks vs --starts/--seed), bad input → exit 2 naming the argument."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from gpulease.spot import generate_trace, write_trace
from tests.cli.conftest import Cli

FIELDS = {
    "trace",
    "policy",
    "deadline_hours",
    "changeover_hours",
    "nodes",
    "windows",
    "mean_cost_ratio",
    "p25",
    "p75",
    "p90",
    "misses",
    "spot_hours",
    "on_demand_hours",
}
# A 10 h job with 12–14 h deadlines on 10-minute ticks keeps every run small.
BASE = ["--job-hours", "10", "--deadline-hours", "12,14", "--changeover-hours", "0.05,0.2"]
ONLINE = "on_demand,greedy,uniform_progress,optimal"


@pytest.fixture
def traces(tmp_path: Path) -> list[Path]:
    paths = []
    for seed, availability in ((1, 0.7), (2, 0.4)):
        path = tmp_path / f"region-{seed}.json"
        write_trace(path, generate_trace(200, seed=seed, availability=availability))
        paths.append(path)
    return paths


def cells(cli: Cli, *args: str) -> list[dict[str, object]]:
    result = cli("spot-sim", *args, "--json", check=True)
    doc = json.loads(result.stdout)
    assert set(doc) == {"cells"}
    out: list[dict[str, object]] = doc["cells"]
    return out


def test_json_has_one_cell_per_trace_policy_deadline_changeover(
    cli: Cli, traces: list[Path]
) -> None:
    out = cells(cli, *map(str, traces), *BASE, "--policy", ONLINE, "--starts", "4")
    assert len(out) == 2 * 4 * 2 * 2
    assert all(set(c) == FIELDS for c in out)
    keys = {(c["trace"], c["policy"], c["deadline_hours"], c["changeover_hours"]) for c in out}
    assert len(keys) == len(out)
    assert {c["trace"] for c in out} == {"region-1", "region-2"}
    for c in out:
        assert c["windows"] == 4 and c["nodes"] == 1
        assert c["p25"] <= c["p75"] <= c["p90"]  # type: ignore[operator]
    by = {(c["trace"], c["policy"], c["deadline_hours"], c["changeover_hours"]): c for c in out}
    for trace, _, deadline, changeover in keys:
        od = by[(trace, "on_demand", deadline, changeover)]
        assert od["mean_cost_ratio"] == pytest.approx(1.0) and od["misses"] == 0
        assert od["spot_hours"] == 0
        best = by[(trace, "optimal", deadline, changeover)]["mean_cost_ratio"]
        for name in ("greedy", "uniform_progress"):
            assert best <= by[(trace, name, deadline, changeover)]["mean_cost_ratio"]  # type: ignore[operator]


def test_table_shows_the_same_cells(cli: Cli, traces: list[Path]) -> None:
    result = cli(
        "spot-sim",
        str(traces[0]),
        *BASE,
        "--policy",
        "greedy,optimal",
        "--starts",
        "3",
        check=True,
    )
    lines = [line for line in result.stdout.splitlines() if "region-1" in line]
    assert len(lines) == 2 * 2 * 2
    assert any("greedy" in line for line in lines) and any("optimal" in line for line in lines)
    assert "mean" in result.stdout and "misses" in result.stdout


def test_starts_and_seed_draw_windows_deterministically(cli: Cli, traces: list[Path]) -> None:
    args = [*map(str, traces), *BASE, "--policy", "greedy", "--starts", "5", "--seed", "7"]
    first = cells(cli, *args)
    assert cells(cli, *args) == first
    # The same windows given explicitly: one generator shared by the traces, in order.
    rng = random.Random(7)
    room = 200 - 14 * 6
    drawn = [[rng.randrange(0, room) for _ in range(5)] for _ in traces]
    for path, ticks in zip(traces, drawn, strict=True):
        explicit = cells(
            cli, str(path), *BASE, "--policy", "greedy", "--start-ticks", ",".join(map(str, ticks))
        )
        assert explicit == [c for c in first if c["trace"] == path.stem]


def test_start_ticks_pick_exactly_those_windows(cli: Cli, traces: list[Path]) -> None:
    out = cells(cli, str(traces[0]), *BASE, "--policy", "optimal", "--start-ticks", "0,10,116")
    assert all(c["windows"] == 3 for c in out)


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--deadline-hours", "8"], "--deadline-hours"),
        (["--deadline-hours", "12,abc"], "--deadline-hours"),
        (["--changeover-hours", "-1"], "--changeover-hours"),
        (["--policy", "greedy,bogus"], "--policy"),
        (["--starts", "3", "--start-ticks", "1,2"], "--starts"),
        (["--start-ticks", "150"], "--start-ticks"),
        (["--nodes", "0"], "--nodes"),
        (["--od-price", "0"], "--od-price"),
        (["--history-hours", "-1"], "--history-hours"),
    ],
)
def test_bad_input_exits_2_naming_the_argument(
    cli: Cli, traces: list[Path], args: list[str], named: str
) -> None:
    result = cli("spot-sim", str(traces[0]), "--job-hours", "10", "--deadline-hours", "12", *args)
    assert result.returncode == 2, result.stdout + result.stderr
    assert named in result.stderr
    assert "Traceback" not in result.stderr


def test_missing_trace_file_exits_2(cli: Cli, tmp_path: Path) -> None:
    result = cli("spot-sim", str(tmp_path / "nope.json"), "--job-hours", "10")
    assert result.returncode == 2
    assert "nope.json" in result.stderr and "Traceback" not in result.stderr


def test_trace_too_short_for_the_deadline_exits_2(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "short.json"
    write_trace(path, generate_trace(50, seed=1))
    result = cli("spot-sim", str(path), "--job-hours", "10", "--deadline-hours", "12")
    assert result.returncode == 2
    assert "TRACE" in result.stderr and "short" in result.stderr
