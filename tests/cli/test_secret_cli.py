"""``--secret NAME[=VALUE]`` through the real entry point (issue 20): a secret still without a
value exits 2 naming it before anything is launched, on every launching command; a launch with
secrets from the option and from the environment shows their names, and no output, view, log or
file under the home holds a value (random canaries)."""

from __future__ import annotations

import secrets as random_secrets
from pathlib import Path

import pytest

from tests.cli.conftest import Cli
from tests.cli.test_launch_cli import _ok, user  # noqa: F401 (the fixture)

TASK = """\
name: {name}
resources: {{providers: [local]}}
secrets:
  HF_TOKEN: null
{extra}run: echo started
"""


def _canary() -> str:
    return random_secrets.token_hex(16)


def _files_holding(root: Path, value: str) -> list[Path]:
    found = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            try:
                if value.encode() in path.read_bytes():
                    found.append(path)
            except OSError:
                continue
    return found


def test_a_secret_without_a_value_exits_2_naming_it_on_every_launching_command(
    user: Cli,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    canary = _canary()
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("WANDB_API_KEY", canary)
    files = {"task": "", "serve": "service: {port: 8080, readiness_probe: /}\n",
             "pool": "pool: {min_nodes: 0, max_nodes: 1}\n"}  # fmt: skip
    for kind, extra in files.items():
        (tmp_path / f"{kind}.yaml").write_text(TASK.format(name=kind, extra=extra))
    for command, kind in ((("launch",), "task"), (("jobs", "launch"), "task"),
                          (("serve", "up"), "serve"), (("pool", "up"), "pool")):  # fmt: skip
        path = tmp_path / f"{kind}.yaml"
        result = _ok(user(*command, str(path), "--secret", "WANDB_API_KEY"), 2)
        assert result.stderr == (
            f"error: {path}:4: secrets.HF_TOKEN: has no value: pass --secret HF_TOKEN=… or set "
            "HF_TOKEN in the environment\n"
        ), command
    path = tmp_path / "task.yaml"
    for args, words in (
        (("--secret", "HF_TOKEN"), "--secret HF_TOKEN: HF_TOKEN is not set in the environment"),
        (("--secret", f"hf-{canary}"), "--secret: expected NAME=VALUE or NAME"),
        (("--secret", f"1BAD={canary}"), "--secret: expected NAME=VALUE or NAME"),
        (("--secret", f"GPULEASE_X={canary}"), "secrets.GPULEASE_X: GPULEASE_X is set by"),
    ):
        result = _ok(user("launch", str(path), *args), 2)
        assert words in result.stderr and canary not in result.stderr + result.stdout, args
    assert not (user.home / "state.db").exists()  # nothing was launched: no server started


@pytest.mark.slow
def test_a_launch_with_secrets_shows_their_names_and_no_value_anywhere(
    user: Cli,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    token, key = _canary(), _canary()
    monkeypatch.setenv("HF_TOKEN", token)
    path = tmp_path / "sec.yaml"
    path.write_text(TASK.format(name="sec", extra="envs:\n  DB_PASSWORD: x\n"))
    launched = _ok(user("launch", str(path), "-d", "--secret", f"WANDB_API_KEY={key}"))
    assert "launching sec" in launched.stderr
    assert launched.stderr.count("envs.DB_PASSWORD: looks like a secret") == 1  # said once
    view = _ok(user("status", "sec", "--json"))
    assert '"secrets": [\n        "HF_TOKEN",\n        "WANDB_API_KEY"\n      ]' in view.stdout
    _ok(user("down", "sec"))
    shown = launched.stdout + launched.stderr + view.stdout
    assert token not in shown and key not in shown
    user("server", "stop")
    assert not _files_holding(user.home, token) and not _files_holding(user.home, key)


def test_jobs_show_serve_status_and_pool_status_name_the_secrets() -> None:
    from gpulease.cli import jobs_cmd, pool_cmd, serve_cmd

    names = {"secrets": ["HF_TOKEN", "WANDB_API_KEY"]}
    job = {"id": 1, "name": "j", "status": "running", "reason": "", "attempt": 1,
           "recoveries": 0, "restarts": 0, "attempts": [], "events": [],
           "cost": {"spent_usd": 0.0, "run_hours": 0.0, "saving_pct": None}}  # fmt: skip
    service = {"name": "s", "status": "ready", "version": 1, "reason": "", "endpoint": "e",
               "replicas": [], "desired_replicas": 1, "min_replicas": 1, "max_replicas": 1,
               "decisions": [], "load": {"qps": 0.0, "in_flight": 0, "load": None},
               "cost": {"per_hour_usd": 0.0, "spent_usd": 0.0,
                        "per_1k_requests_usd": None}}  # fmt: skip
    pool = {"name": "p", "status": "ready", "reason": "", "nodes": [], "desired_nodes": 0,
            "min_nodes": 0, "max_nodes": 1, "idle_timeout_s": 60.0, "price_per_hour": 0.0,
            "waiting_jobs": [], "decisions": []}  # fmt: skip
    for text in (jobs_cmd.report({**job, **names}), serve_cmd.report({**service, **names}),
                 pool_cmd.report({**pool, **names})):  # fmt: skip
        assert "  secrets: HF_TOKEN, WANDB_API_KEY" in text.splitlines()
    assert "secrets" not in jobs_cmd.report({**job, "secrets": []})
