"""The SDK surface: `import gpulease` is light, its `__all__` is curated, and the documented calls
work end to end."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import gpulease

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "finetune-7b.yaml"
DEEPSEEK_V3 = EXAMPLE.with_name("pretrain-deepseek-v3.yaml")


def test_public_surface_is_curated() -> None:
    assert sorted(gpulease.__all__) == [
        "Catalog",
        "Plan",
        "PlanResult",
        "Task",
        "__version__",
        "estimate",
        "load_task",
        "plan",
        "plan_all",
        "tco",
    ]
    for name in gpulease.__all__:
        assert getattr(gpulease, name) is not None


def test_import_gpulease_loads_nothing_heavy() -> None:
    code = (
        "import sys, gpulease; print(sorted(m for m in ('numpy', 'pydantic', 'typer', 'rich') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_plan_returns_ranked_plans() -> None:
    task = gpulease.load_task(EXAMPLE)
    plans = gpulease.plan(task, config={})
    assert plans and isinstance(plans[0], gpulease.Plan)
    assert [p.rank for p in plans] == list(range(1, len(plans) + 1))
    result = gpulease.plan_all(task, objective="fastest", top=3, config={})
    assert isinstance(result, gpulease.PlanResult) and len(result.plans) <= 3


def test_catalog_is_reachable_from_the_sdk() -> None:
    catalog = gpulease.Catalog.load(bundled_only=True)
    assert len(catalog.offers) > 300
    assert catalog.spec_for("H100-SXM").peak_tflops("bf16") > 900


def test_estimate_answers_for_hardware_the_user_names() -> None:
    # "How long would DeepSeek-V3-size pretraining take on 2,048 H800?" (no H800 offer needed)
    answer = gpulease.estimate(DEEPSEEK_V3, gpus="H800:8", nodes=256)
    assert answer.fits and answer.gpus == 2048 and answer.part == "H800-SXM"
    assert answer.hours is not None and 40 * 24 < answer.hours.expected < 75 * 24
    task = gpulease.load_task(DEEPSEEK_V3)
    too_small = gpulease.estimate(task, gpus="H100:8", nodes=2)
    assert not too_small.fits and "needs ≥" in too_small.notes[0]
    importlib.import_module("gpulease.estimate.moe")  # still callable once imported by name
    assert gpulease.estimate is sys.modules["gpulease.estimate"]
    assert gpulease.estimate(task.workload, "H800:8", 256).hours == answer.hours


def test_the_sdk_fills_envs_without_a_value_and_refuses_a_launch_that_lacks_one() -> None:
    import pytest

    from gpulease.client import Client
    from gpulease.client.tasks import prepare_task
    from gpulease.errors import SpecError

    sky = {"run": "echo", "envs": {"HF_TOKEN": None, "MODEL": "llama"}}
    body = prepare_task(sky, envs={"MODEL": "mistral"}, environ={"HF_TOKEN": "t"}).body
    assert body["envs"] == {"HF_TOKEN": "t", "MODEL": "mistral"}
    task = gpulease.load_task(EXAMPLE)
    assert prepare_task(task, envs={"WANDB_API_KEY": "w"}).body["envs"]["WANDB_API_KEY"] == "w"
    with pytest.raises(SpecError, match=r"envs\.1BAD|'1BAD'"):
        prepare_task(task, envs={"1BAD": "x"})
    # refused before any request: a server on a closed port would answer ServerUnavailable
    with (
        Client("http://127.0.0.1:9", "token", timeout=1.0) as api,
        pytest.raises(SpecError, match=r"envs\.HF_TOKEN: has no value: pass --env HF_TOKEN=…"),
    ):
        api.launch(sky, name="gated")
