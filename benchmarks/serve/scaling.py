"""Scaling under load: a real serve-digits service on the local provider (fake T4s) and on the sim
provider (a simulated cloud whose nodes are local processes: a fixed simulated provisioning
delay, ``--sim-boot`` simulated seconds at ``--time-scale`` simulated seconds per real second),
through a real server process and its load balancer, under steady open-loop load
(benchmarks/serve/loadgen.py, bounded, only 127.0.0.1).

Phases, per provider (``--provider local|sim|both``, one after the other in the same run and the
same server), one service, in a fresh temporary GPULEASE_HOME that is left with nothing running:

1. **scale-up**: one ready replica at a light rate, then a sustained overload (``--overload``
   req/s, ~3 × one replica's ``up.above`` at ``PREDICT_DELAY_S``); measured: from the overload's
   start to the scale-up decision (the ``up.for`` window and the loop's tick) and to the new
   replica serving (ready, in the balancer: it answers requests); on sim also the new node's
   simulated boot (from the sim's own record) and what the time would be had that boot taken its
   simulated length in real time;
2. **scale-down**: the rate drops to ``--light`` req/s until the service is back to one replica;
   measured: requests failed from the drop until one replica is left (the second one drained and
   terminated);
3. **rolling update**: ``serve update`` at ``--steady`` req/s until every replica is of version 2;
   measured: requests failed during the rollout.

    python benchmarks/serve/scaling.py [--provider both] [--sim-boot 60] [--time-scale 30]
        [--delay 0.05] [--overload 60] [--light 4] [--steady 20]
        [--json benchmarks/serve/results/scaling.json]

Target (issue 17): zero failed requests during a scale-down and a rolling update.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `benchmarks.serve` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.serve.loadgen import LoadResult, Schedule, run_load

from gpulease.client import Client
from gpulease.client.server import read_info

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "serve-digits"
TRAIN = ROOT / "examples" / "train" / "train_digits.py"


def _args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--model", type=Path, help="an exported model.onnx (default: train one)")
    parser.add_argument("--delay", type=float, default=0.05, help="PREDICT_DELAY_S (s)")
    parser.add_argument("--overload", type=float, default=60.0, help="req/s of the overload")
    parser.add_argument("--light", type=float, default=4.0, help="req/s during the scale-down")
    parser.add_argument("--steady", type=float, default=20.0, help="req/s during the update")
    parser.add_argument("--provider", choices=["local", "sim", "both"], default="both")
    parser.add_argument("--sim-boot", type=float, default=60.0, help="sim provisioning (sim s)")
    parser.add_argument("--time-scale", type=float, default=30.0, help="sim s per real s")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    if not (args.sim_boot >= 0 and args.time_scale > 0):
        parser.error("--sim-boot: at least 0; --time-scale: more than 0")
    return args


def _wait(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(0.2)
    raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")


class Load:
    """2 s open-loop runs at ``rate`` back to back on a thread until the block ends."""

    def __init__(self, url: str, rate: float, body: bytes) -> None:
        self.url, self.rate, self.body = url, rate, body
        self.results: list[LoadResult] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            schedule = Schedule.constant(self.rate, 2.0)
            self.results.append(run_load(self.url, schedule, body=self.body, timeout_s=20.0))

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)

    def figures(self) -> dict[str, Any]:
        records = [r for result in self.results for r in result.records]
        failed = [r for r in records if not r.ok]
        errors: dict[str, int] = {}
        for r in failed:
            key = str(r.status) if r.status else (r.error or "no answer").split(":")[0]
            errors[key] = errors.get(key, 0) + 1
        return {"rate": self.rate, "requests": len(records), "failed": len(failed),
                "failures": errors}  # fmt: skip


@contextmanager
def server(home: Path, args: argparse.Namespace) -> Iterator[Client]:
    """A server process on ``home`` (fake T4s on the local provider; the sim provider with a
    fixed provisioning delay and no preemption); stopped at the end."""
    boot = f"[{args.sim_boot:g}, {args.sim_boot:g}]"
    (home / "config.yaml").write_text(
        "providers:\n  local: {gpus: 4, accelerator: T4}\n"
        f"  sim: {{time_scale: {args.time_scale:g}, provision_seconds: {boot}}}\n"
    )
    env = {**os.environ, "GPULEASE_HOME": str(home)}
    log = open(home / "server.log", "ab")  # noqa: SIM115 - the child keeps it
    proc = subprocess.Popen([sys.executable, "-m", "gpulease.server", "run"], cwd=ROOT, env=env,
                            stdout=log, stderr=log, start_new_session=True)  # fmt: skip
    log.close()
    try:
        info = _wait(lambda: (i := read_info(home)) and i.pid == proc.pid and i, 30, "server")
        api = Client(info.url, (home / "server.token").read_text().strip())
        _wait(api.health, 30, "the server's health")
        yield api
        api.close()
    finally:
        proc.terminate()
        proc.wait(30)
        _stop_nodes(home)


def _stop_nodes(home: Path) -> None:
    """Terminate any replica node a failed run left (local and sim nodes are local processes
    that outlive their server)."""
    from gpulease.providers.base import InstanceState
    from gpulease.providers.local import LocalProvider

    for root in (home / "local", home / "sim" / "local"):
        if not root.exists():
            continue
        nodes = LocalProvider(root, kill_grace_s=0.5)
        live = [i.id for i in nodes.list_instances({}) if i.state is not InstanceState.TERMINATED]
        if live:
            nodes.terminate(live)


def _export(workdir: Path, model: Path | None) -> None:
    shutil.copy(EXAMPLE / "app.py", workdir / "app.py")
    if model is not None:
        shutil.copy(model, workdir / "model.onnx")
        return
    command = [sys.executable, str(TRAIN), "--epochs", "3", "--onnx", str(workdir / "model.onnx")]
    subprocess.run(command, check=True, capture_output=True, cwd=workdir)


def service(workdir: Path, delay_s: float, version: str, provider: str) -> dict[str, Any]:
    """examples/serve-digits/service.yaml on ``provider``, windows of a few seconds, 1..2
    replicas."""
    import yaml

    data: dict[str, Any] = yaml.safe_load((EXAMPLE / "service.yaml").read_text())
    data["workdir"] = str(workdir)
    data["resources"]["providers"] = [provider]
    data["envs"] = {"PREDICT_DELAY_S": str(delay_s), "VERSION": version}
    data["service"]["replicas"] = {"min": 1, "max": 2}
    data["service"]["readiness_probe"]["initial_delay"] = "30s"
    data["service"]["autoscale"] = {
        "metric": "load", "target_per_replica": 2, "cooldown": "2s",
        "up": {"above": 0.8, "add": 1, "for": "2s"},
        "down": {"below": 0.3, "remove": 1, "for": "2s"},
    }  # fmt: skip
    return data


def _ready(api: Client, name: str, version: int, count: int) -> Callable[[], Any]:
    def check() -> dict[str, Any] | None:
        view = api.serve_status(name)
        live = [r for r in view["replicas"] if r["state"] == "ready" and r["version"] == version]
        settled = view["status"] == "ready" and view["version"] == version
        return view if settled and len(live) == len(view["replicas"]) == count else None

    return check


def _sim_boot(home: Path, args: argparse.Namespace) -> dict[str, float]:
    """The newest sim node's simulated provisioning delay, from the sim's own record."""
    records = json.loads((home / "sim" / "sim.json").read_text()).values()
    newest = max(records, key=lambda r: float(r["launched_at"]))
    boot = float(newest["ready_at"]) - float(newest["launched_at"])
    return {"sim_boot_s": round(boot, 2), "sim_boot_real_s": round(boot / args.time_scale, 2),
            "time_scale": args.time_scale}  # fmt: skip


def measure(api: Client, home: Path, workdir: Path, args: argparse.Namespace, provider: str
            ) -> dict[str, Any]:  # fmt: skip
    """The three phases of one service on ``provider``; it is down at the end."""
    body = (EXAMPLE / "request.json").read_bytes()
    name = f"digits-{provider}"

    def spec(version: str) -> dict[str, Any]:
        return {**service(workdir, args.delay, version, provider), "name": name}

    view = api.serve_up(spec("1"))
    view = _wait(_ready(api, name, 1, 1), 120, "the first replica")
    url = view["endpoint"] + "/predict"
    figures: dict[str, Any] = {"provider": provider}
    with Load(url, args.overload, body) as overload:
        start = time.monotonic()
        _wait(lambda: api.serve_status(name)["desired_replicas"] >= 2, 60, "the scale-up")
        decided = time.monotonic() - start
        _wait(_ready(api, name, 1, 2), 90, "the second replica serving")
        serving = time.monotonic() - start
    figures["scale_up"] = {"overload_to_decision_s": round(decided, 2),
                           "overload_to_serving_s": round(serving, 2),
                           "load": overload.figures()}  # fmt: skip
    if provider == "sim":
        boot = _sim_boot(home, args)
        as_if = serving - boot["sim_boot_real_s"] + boot["sim_boot_s"]
        figures["scale_up"] |= {**boot, "overload_to_serving_at_sim_boot_s": round(as_if, 2)}
    with Load(url, args.light, body) as light:
        start = time.monotonic()
        _wait(_ready(api, name, 1, 1), 90, "the scale-down to one replica")
        figures["scale_down"] = {"drop_to_one_replica_s": round(time.monotonic() - start, 2)}
    figures["scale_down"]["load"] = light.figures()
    with Load(url, args.steady, body) as steady:
        start = time.monotonic()
        api.serve_update(name, spec("2"))
        _wait(_ready(api, name, 2, 1), 120, "version 2 to replace version 1")
        figures["update"] = {"rollout_s": round(time.monotonic() - start, 2)}
    figures["update"]["load"] = steady.figures()
    figures["decisions"] = [(d["from"], d["to"], d["reason"])
                            for d in api.serve_status(name)["decisions"]]  # fmt: skip
    api.serve_down(name)
    _wait(lambda: api.serve_status(name)["status"] == "down", 90, "the service to be down")
    return figures


def _table(runs: list[dict[str, Any]]) -> str:
    lines = ["| provider | phase | time | rate req/s | requests | failed |",
             "|---|---|---:|---:|---:|---:|"]  # fmt: skip
    for figures in runs:
        up, down, update = figures["scale_up"], figures["scale_down"], figures["update"]
        serving = f"{up['overload_to_serving_s']} s"
        if "sim_boot_s" in up:
            serving += (f" (sim boot {up['sim_boot_s']:g} sim s = {up['sim_boot_real_s']:g} s; "
                        f"{up['overload_to_serving_at_sim_boot_s']} s at that boot)")  # fmt: skip
        rows = [
            ("sustained overload → scale-up decision", f"{up['overload_to_decision_s']} s", up),
            ("sustained overload → new replica serving", serving, up),
            ("scale-down 2 → 1 (drop → one replica left)",
             f"{down['drop_to_one_replica_s']} s", down),
            ("rolling update (update → all version 2)", f"{update['rollout_s']} s", update),
        ]  # fmt: skip
        for label, took, part in rows:
            load = part["load"]
            lines.append(f"| {figures['provider']} | {label} | {took} | {load['rate']:g} | "
                         f"{load['requests']} | {load['failed']} |")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    providers = ["local", "sim"] if args.provider == "both" else [args.provider]
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="gpulease-scaling-") as tmp:
        home, workdir = Path(tmp) / "home", Path(tmp) / "app"
        home.mkdir()
        workdir.mkdir()
        _export(workdir, args.model)
        with server(home, args) as api:
            runs = [measure(api, home, workdir, args, provider) for provider in providers]
    print(_table(runs))
    if args.json:
        data = {
            "started_at": started,
            "load_average": os.getloadavg(),
            "args": {k: str(v) for k, v in vars(args).items() if k != "json"},
            "runs": runs,
        }
        args.json.write_text(json.dumps(data, indent=1) + "\n")  # fmt: skip
    failed = sum(run[k]["load"]["failed"] for run in runs for k in ("scale_down", "update"))
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
