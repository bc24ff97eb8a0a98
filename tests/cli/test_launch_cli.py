"""The launch commands as a user runs them: the real ``gpulease`` entry point in subprocesses, a
private home, the server started in the background on first use (and said so, once), the real
local provider. Bad input exits 2 without a traceback."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sysconfig
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpulease.agent.venvs import READY
from gpulease.providers.base import InstanceState
from gpulease.providers.local import LocalProvider
from tests.cli.conftest import Cli
from tests.providers.procs import node_pids
from tests.server.conftest import wait_until
from tests.wheels import make_wheel


@pytest.fixture
def user(cli: Cli) -> Iterator[Cli]:
    yield cli
    cli("server", "stop")
    provider = LocalProvider(cli.home / "local", kill_grace_s=0.5)
    live = [i.id for i in provider.list_instances({}) if i.state is not InstanceState.TERMINATED]
    if live:
        provider.terminate(live)
        wait_until(lambda: not _processes(cli.home) or None, 20, "nodes to die")


def _processes(home: Path) -> list[int]:
    provider = LocalProvider(home / "local")
    ids = [p.stem for p in (provider.root / "instances").glob("*.json")]
    return node_pids(provider, ids) if ids else []


def _ok(
    result: subprocess.CompletedProcess[str], code: int = 0
) -> subprocess.CompletedProcess[str]:
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    return result


@pytest.mark.slow
def test_the_readme_flow_launch_status_logs_exec_down(user: Cli) -> None:
    first = _ok(user("launch", "examples/quickstart.yaml"))
    assert first.stderr.count("started gpulease server (pid ") == 1
    assert "launching quickstart on local/local" in first.stderr
    assert "test accuracy" in first.stdout and "quickstart: succeeded" in first.stderr

    table = _ok(user("status")).stdout
    assert "quickstart" in table and "SUCCEEDED" in table
    data = json.loads(_ok(user("status", "--json")).stdout)
    assert [c["status"] for c in data["clusters"]] == ["succeeded"]
    logs = _ok(user("logs", "quickstart"))
    assert "test accuracy" in logs.stdout and "started gpulease" not in logs.stderr
    assert (
        _ok(user("exec", "quickstart", "echo hi from $GPULEASE_NODE_RANK")).stdout == "hi from 0\n"
    )
    _ok(user("exec", "quickstart", "exit 3"), 3)
    assert "local: enabled" in _ok(user("check")).stdout

    assert "quickstart: terminated" in _ok(user("down", "quickstart")).stdout
    assert _processes(user.home) == []
    assert "gpulease server (pid" in _ok(user("server", "status")).stdout
    assert "stopped gpulease server" in _ok(user("server", "stop")).stdout
    _ok(user("server", "status"), 1)


@pytest.mark.slow
def test_detached_launch_then_logs_follow_returns_the_task_exit_code(
    user: Cli, tmp_path: Path
) -> None:
    task = tmp_path / "fails.yaml"
    task.write_text("name: fails\nresources: {providers: [local]}\nrun: echo out; exit 3\n")
    launched = _ok(user("launch", str(task), "-d", "-i", "30", "--down"))
    assert "gpulease logs fails -f" in launched.stderr
    followed = _ok(user("logs", "fails", "-f"), 3)
    assert followed.stdout == "out\n"
    data = json.loads(_ok(user("status", "fails", "--json")).stdout)["clusters"][0]
    assert data["status"] == "failed" and data["autostop"] == {
        "minutes": 30, "down": True, "gpu_utilisation_below": None}  # fmt: skip
    assert "fails: stop after 5 idle min" in _ok(user("autostop", "fails", "-i", "5")).stdout
    ruled = _ok(user("autostop", "fails", "-i", "5", "--gpu-below", "3")).stdout
    assert "fails: stop after 5 idle min (idle: no task, or GPUs below 3%)" in ruled
    refused = user("autostop", "fails", "-i", "5", "--gpu-below", "0")
    assert "gpu_utilisation_below" in _ok(refused, 2).stderr
    _ok(user("down", "fails"))


def test_bad_input_exits_2_without_a_traceback(user: Cli, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nnum_nodes: zero\nrun: echo\n")
    missing_dir = tmp_path / "nodir.yaml"
    missing_dir.write_text("name: nodir\nworkdir: does/not/exist\nrun: echo\n")
    for args, words in (
        (("launch", "no-such-file.yaml"), "no-such-file.yaml"),
        (("launch", str(bad)), "num_nodes"),
        (("launch", str(missing_dir)), "workdir"),
        (("launch", "examples/quickstart.yaml", "--name", "bad name!"), "not a valid cluster name"),
        (("logs", "nope"), "no cluster named 'nope'"),
        (("down", "nope"), "no cluster named 'nope'"),
        (("exec", "nope", "ls"), "no cluster named 'nope'"),
        (("stop", "nope"), "no cluster named 'nope'"),
    ):
        result = _ok(user(*args), 2)
        assert words in result.stderr, (args, result.stderr)


@pytest.mark.slow
def test_setup_pip_installs_into_a_venv_of_the_clusters_and_the_next_cluster_reuses_it(
    user: Cli, tmp_path: Path
) -> None:
    pkg = f"gl_tiny_{uuid.uuid4().hex[:8]}"
    wheels = tmp_path / "wheels"
    make_wheel(wheels, pkg, value="installed by setup")
    before = _own_site_packages()
    body = (
        f"resources: {{providers: [local]}}\n"
        f"setup: pip install --no-index --find-links {wheels} {pkg}\n"
        f"run: python -c 'import {pkg}; print({pkg}.VALUE)'; echo \"venv $VIRTUAL_ENV\"\n"
    )
    first = tmp_path / "first.yaml"
    first.write_text(f"name: first\nnum_nodes: 2\n{body}")  # two nodes make it at once
    out = _ok(user("launch", str(first)))
    assert "installed by setup" in out.stdout and "first: succeeded" in out.stderr
    venv = Path(_line(out.stdout, "venv "))
    assert venv.parent == user.home / "local" / "venvs"
    other = _ok(user("logs", "first", "--rank", "1")).stdout
    assert Path(_line(other, "venv ")) == venv and "installed by setup" in other
    marker = (venv / READY).stat()

    second = tmp_path / "second.yaml"
    second.write_text(f"name: second\n{body}")
    out = _ok(user("launch", str(second)))
    assert (
        Path(_line(out.stdout, "venv ")) == venv and "Requirement already satisfied" in out.stdout
    )
    again = (venv / READY).stat()
    assert (again.st_ino, again.st_mtime_ns) == (marker.st_ino, marker.st_mtime_ns)  # not remade
    assert importlib.util.find_spec(pkg) is None  # the user's (and server's) environment...
    assert _own_site_packages() == before  # ...got no new files


@pytest.mark.slow
def test_a_failed_setup_or_run_says_where_on_the_last_line(user: Cli, tmp_path: Path) -> None:
    setup = tmp_path / "setup.yaml"
    setup.write_text("name: bad-setup\nresources: {providers: [local]}\n"
                     "setup: echo installing; exit 2\nrun: echo never\n")  # fmt: skip
    out = _ok(user("launch", str(setup)), 2)
    assert "installing" in out.stdout and "never" not in out.stdout
    assert out.stderr.splitlines()[-1] == (
        "bad-setup: failed in setup on node 0, exit code 2 — "
        "see its log: gpulease logs bad-setup --rank 0"
    )
    run = tmp_path / "run.yaml"
    run.write_text("name: bad-run\nnum_nodes: 2\nresources: {providers: [local]}\n"
                   'run: if [ "$GPULEASE_NODE_RANK" = 1 ]; then echo rank1 broke; exit 5; fi; '
                   "sleep 30\n")  # fmt: skip
    out = _ok(user("launch", str(run)), 5)
    assert out.stderr.splitlines()[-1] == (
        "bad-run: failed in run on node 1, exit code 5 — "
        "see its log: gpulease logs bad-run --rank 1"
    )
    assert "rank1 broke" in _ok(user("logs", "bad-run", "--rank", "1")).stdout
    view = json.loads(_ok(user("status", "bad-run", "--json")).stdout)["clusters"][0]
    assert view["task_failure"] == {"rank": 1, "state": "FAILED", "step": "run", "exit_code": 5,
                                    "signal": None, "detail": "run exited 5"}  # fmt: skip
    assert view["reason"].endswith("(exit code 5): run exited 5")


def _line(text: str, prefix: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(prefix))[len(prefix) :]


def _own_site_packages() -> set[str]:
    """What the test interpreter's site-packages holds (byte-code caches aside)."""
    purelib = Path(sysconfig.get_paths()["purelib"])
    return {p.name for p in purelib.iterdir() if p.name != "__pycache__"}


SECRET = "hf_" + uuid.uuid4().hex  # never to be printed, logged or shown
GATED = """\
name: {name}
resources: {{providers: [local], disk_tier: low}}
envs:
  HF_TOKEN:
  WANDB_API_KEY:
  MODEL: llama
run: |
  printf %s "$HF_TOKEN" | sha256sum | cut -c1-16
  echo "wandb=$WANDB_API_KEY model=$MODEL extra=$EXTRA"
"""


def _sha16(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()[:16]


@pytest.mark.slow
def test_envs_without_a_value_come_from_env_options_and_the_environment_never_printed(
    user: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    task = tmp_path / "gated.yaml"
    task.write_text(GATED.format(name="gated"))
    dotenv = tmp_path / "run.env"
    dotenv.write_text("# the model for this run\nexport MODEL='mistral 7b'\n")
    monkeypatch.setenv("WANDB_API_KEY", "w-from-env")
    out = _ok(user("launch", str(task), "--env", f"HF_TOKEN={SECRET}", "--env-file", str(dotenv),
                   "--env", "EXTRA=1"))  # fmt: skip
    assert _sha16(SECRET) in out.stdout  # the node got the value...
    assert "wandb=w-from-env model=mistral 7b extra=1" in out.stdout
    assert "gated: succeeded" in out.stderr
    ignored = "resources.disk_tier: low is honoured on aws only (the root EBS volume's type); "
    assert out.stderr.count(f"warning: {ignored}local ignores it\n") == 1  # said once
    shown = [out.stdout, out.stderr, _ok(user("status", "gated", "--json")).stdout,
             _ok(user("logs", "gated")).stdout, (user.home / "server.log").read_text()]  # fmt: skip
    assert not [text for text in shown if SECRET in text]  # ...and nothing shows it
    _ok(user("down", "gated"))


def test_an_env_still_without_a_value_exits_2_and_launches_nothing(
    user: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    task = tmp_path / "gated.yaml"
    task.write_text(GATED.format(name="gated"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("WANDB_API_KEY", SECRET)
    for command in (("launch",), ("jobs", "launch")):
        result = _ok(user(*command, str(task)), 2)
        assert result.stderr == (
            f"error: {task}:4: envs.HF_TOKEN: has no value: pass --env HF_TOKEN=… or set "
            "HF_TOKEN in the environment\n"
        )
    for args, words in (
        (("--env", f"1BAD={SECRET}"), "--env: '1BAD' is not an environment variable name"),
        (("--env", "HF_TOKEN"), "--env HF_TOKEN: HF_TOKEN is not set in the environment"),
        (("--env-file", str(tmp_path / "none.env")), "cannot read it: No such file"),
    ):
        result = _ok(user("launch", str(task), *args), 2)
        assert words in result.stderr and SECRET not in result.stderr, result.stderr
    assert not (user.home / "server.json").exists()  # no server was started: nothing launched
