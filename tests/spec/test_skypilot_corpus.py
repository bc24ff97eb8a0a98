"""The SkyPilot corpus: public SkyPilot task files, planned as a SkyPilot user would plan them.

Each file under ``skypilot_corpus/files/`` is a verbatim copy of a public task file;
``skypilot_corpus/manifest.yaml`` says where it came from and what a SkyPilot user means by it
(written from SkyPilot's documented semantics, not from what gpulease does today). For every
entry the test runs ``gpulease plan FILE --json -n 10`` in-process (Typer's ``CliRunner`` on
``gpulease.cli.main:app``, a private ``GPULEASE_HOME``) and checks:

- a file that should plan exits 0 and EVERY returned plan uses an accepted accelerator, an
  accepted GPU count per node, the asked pricing (``spot`` / ``on_demand`` / ``either``), the
  asked region class and node count; an entry with ``or_fail`` may instead fail with one of its
  exit codes and a message naming the unsupported feature;
- a file gpulease cannot honour exits with the expected code (1 or 2) and a message naming the
  feature (case-insensitive substring, stdout or stderr), without a traceback.

Region classes: ``any``; ``provider:P``; ``region:P/R`` (or ``region:R``); ``zone:P/R/Z`` (or
``zone:Z``). A list of classes means any of them. README.md in the corpus folder tells how to
add a file.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpulease.spec import task_json_schema

CORPUS = Path(__file__).parent / "skypilot_corpus"
FILES = CORPUS / "files"
MANIFEST: list[dict[str, Any]] = yaml.safe_load((CORPUS / "manifest.yaml").read_text())["files"]
ENTRY_KEYS = {"file", "source", "path", "commit", "licence", "sha256", "exercises", "expect"}
PLAN_KEYS = {"accelerators", "counts", "pricing", "region"}
CPU_NAMES = {None, "", "CPU", "cpu", "none"}
REGION_CLASS = re.compile(r"any|provider:[\w-]+|region:([\w-]+/)?[\w-]+|zone:([\w-]+/){0,2}[\w-]+")


@dataclass(frozen=True)
class Outcome:
    """What ``gpulease plan`` did: its exit code and everything it printed."""

    exit_code: int
    stdout: str
    text: str  # stdout, stderr and the error line ``gpulease`` prints, together


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private gpulease home: no user config, catalog cache or server is read."""
    return tmp_path_factory.mktemp("home")


def _plan(path: Path, home: Path) -> Outcome:
    """``gpulease plan PATH --json -n 10`` in-process, with the exit codes of the console script.

    ``gpulease.cli.main.run`` (the console entry) maps a ``UserInputError`` to exit 2 and any
    other ``GpuleaseError`` to exit 1, printing ``error: …``; ``CliRunner`` hands the exception
    back instead, so the same mapping is applied here. Anything else is a crash.
    """
    from gpulease.cli.main import app
    from gpulease.errors import GpuleaseError, UserInputError

    env = {"GPULEASE_HOME": str(home), "COLUMNS": "200", "SLURM_CONF": None}
    env["GPULEASE_DB_URL"] = None
    result = CliRunner().invoke(app, ["plan", str(path), "--json", "-n", "10"], env=env)
    text = _scrub(result.stdout + result.stderr, path)
    exc = result.exception
    if exc is None or isinstance(exc, SystemExit):
        return Outcome(result.exit_code, result.stdout, text)
    if isinstance(exc, GpuleaseError):
        code = 2 if isinstance(exc, UserInputError) else 1
        return Outcome(code, result.stdout, text + "\nerror: " + _scrub(str(exc), path))
    raise AssertionError(f"{path.name}: gpulease plan crashed") from exc


def _scrub(text: str, path: Path) -> str:
    """``text`` without the file's own name: ``…-k8s-….yaml`` must not count as naming k8s."""
    return text.replace(str(path), "FILE").replace(path.name, "FILE")


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]


def _message_named(outcome: Outcome, words: Sequence[str]) -> bool:
    text = outcome.text.lower()
    return any(word.lower() in text for word in words)


def _failure_ok(outcome: Outcome, expect: Mapping[str, Any]) -> str | None:
    """None when ``outcome`` is the expected failure, else what is wrong with it."""
    codes = _as_list(expect["exit"])
    words = _as_list(expect["message"])
    problems = []
    if outcome.exit_code not in codes:
        problems.append(f"exit {outcome.exit_code}, expected {' or '.join(map(str, codes))}")
    if not _message_named(outcome, words):
        problems.append(f"no message naming {' or '.join(map(repr, words))}")
    if "Traceback" in outcome.text:
        problems.append("a traceback was printed")
    return "; ".join(problems) or None


def _region_ok(plan: Mapping[str, Any], classes: Any) -> bool:
    for cls in _as_list(classes):
        if cls == "any":
            return True
        kind, _, spec = cls.partition(":")
        parts = spec.split("/")
        provider = parts[0] if len(parts) > 1 or kind == "provider" else None
        if provider is not None and plan["provider"] != provider:
            continue
        if kind == "provider":
            return True
        if kind == "region" and plan["region"] == parts[-1]:
            return True
        if kind == "zone" and plan.get("zone") == parts[-1]:
            region = parts[1] if len(parts) == 3 else None
            if region is None or plan["region"] == region:
                return True
    return False


def _accelerator(plan: Mapping[str, Any]) -> tuple[str, int]:
    name = plan.get("accelerator")
    if name in CPU_NAMES:
        return "CPU", 0
    return str(name), int(plan.get("gpus_per_node") or 0)


def _mismatch(plan: Mapping[str, Any], alternative: Mapping[str, Any]) -> str | None:
    """None when ``plan`` is what ``alternative`` asks for, else the first difference."""
    name, gpus = _accelerator(plan)
    counts = alternative["counts"]
    accepted = counts.get(name, []) if isinstance(counts, Mapping) else counts
    pricing = alternative["pricing"]
    allowed = {"spot", "on_demand"} if pricing == "either" else {pricing}
    types = alternative.get("instance_types")
    where = f"{plan['provider']}/{plan['region']}/{plan.get('zone')}"
    named = f"accelerator {name}, expected one of {alternative['accelerators']}"
    checks = (
        (name in alternative["accelerators"], named),
        (gpus in accepted, f"{gpus} x {name} per node, expected {accepted}"),
        (plan["pricing"] in allowed, f"pricing {plan['pricing']}, expected {pricing}"),
        (_region_ok(plan, alternative["region"]), f"{where}, expected {alternative['region']}"),
        (not types or plan["instance_type"] in types, f"{plan['instance_type']}, expected {types}"),
    )
    return next((problem for ok, problem in checks if not ok), None)


def _describe(plan: Mapping[str, Any]) -> str:
    name, gpus = _accelerator(plan)
    where = "/".join(str(p) for p in (plan["provider"], plan["region"], plan.get("zone")) if p)
    return (
        f"#{plan.get('rank')} {where} {plan['instance_type']} "
        f"{plan['num_nodes']}x{gpus} {name} {plan['pricing']}"
    )


def _plans_ok(outcome: Outcome, expect: Mapping[str, Any]) -> str | None:
    """None when every plan is what ``expect`` asks for, else what is wrong."""
    if outcome.exit_code != 0:
        tail = outcome.text.strip().splitlines()[-3:]
        return f"exit {outcome.exit_code}, expected plans: {' | '.join(tail)}"
    plans = json.loads(outcome.stdout)["plans"]
    if not plans:
        return "exit 0 with no plan (expected plans, or an exit 1/2 naming the reason)"
    alternatives = expect.get("any_of") or [expect]
    problems = []
    for plan in plans:
        reasons = [_mismatch(plan, alt) for alt in alternatives]
        if all(reasons):
            problems.append(f"{_describe(plan)}: {reasons[0]}")
        elif plan["num_nodes"] != expect["num_nodes"]:
            nodes = f"{plan['num_nodes']} nodes, expected {expect['num_nodes']}"
            problems.append(f"{_describe(plan)}: {nodes}")
    if problems:
        return f"{len(problems)} of {len(plans)} plans not asked for: " + "; ".join(problems)
    return None


def _check(entry: Mapping[str, Any], outcome: Outcome) -> str | None:
    expect = entry["expect"]
    if "exit" in expect:
        return _failure_ok(outcome, expect)
    problem = _plans_ok(outcome, expect)
    if problem and "or_fail" in expect and _failure_ok(outcome, expect["or_fail"]) is None:
        return None
    return problem


@pytest.mark.parametrize("entry", MANIFEST, ids=lambda e: Path(e["file"]).stem)
def test_corpus_file_plans_what_it_asks_for_or_names_what_is_not_supported(
    entry: dict[str, Any], home: Path
) -> None:
    outcome = _plan(FILES / entry["file"], home)
    problem = _check(entry, outcome)
    assert problem is None, f"{entry['file']} ({entry['exercises']}): {problem}"


def test_manifest_and_files_match_one_to_one() -> None:
    listed = [entry["file"] for entry in MANIFEST]
    assert len(listed) == len(set(listed)), "a file is listed twice"
    assert sorted(listed) == sorted(p.name for p in FILES.iterdir())
    assert len(listed) >= 60


@pytest.mark.parametrize("entry", MANIFEST, ids=lambda e: Path(e["file"]).stem)
def test_entry_names_its_source_and_is_kept_verbatim(entry: dict[str, Any]) -> None:
    assert set(entry) == ENTRY_KEYS
    assert re.fullmatch(r"[\w.-]+/[\w.-]+", entry["source"])
    assert entry["path"].endswith((".yaml", ".yml")) and not entry["path"].startswith("/")
    assert re.fullmatch(r"[0-9a-f]{40}", entry["commit"])
    assert entry["licence"] == "Apache-2.0"
    data = (FILES / entry["file"]).read_bytes()
    assert hashlib.sha256(data).hexdigest() == entry["sha256"], "the copy was edited"


@pytest.mark.parametrize("entry", MANIFEST, ids=lambda e: Path(e["file"]).stem)
def test_expectation_is_well_formed(entry: dict[str, Any]) -> None:
    from gpulease.spec import KNOWN_ACCELERATORS

    expect = entry["expect"]
    if "exit" in expect:
        assert set(expect) == {"exit", "message"}
        assert set(_as_list(expect["exit"])) <= {1, 2} and _as_list(expect["message"])
        return
    assert isinstance(expect["num_nodes"], int) and expect["num_nodes"] >= 1
    outer = {"num_nodes", "or_fail", "any_of"} if "any_of" in expect else {"num_nodes", "or_fail"}
    inner = PLAN_KEYS | {"instance_types"}
    assert set(expect) <= outer | (set() if "any_of" in expect else inner)
    for alternative in expect.get("any_of") or [expect]:
        assert PLAN_KEYS <= set(alternative) - outer <= inner
        assert set(alternative["accelerators"]) <= {*KNOWN_ACCELERATORS, "CPU"}
        assert alternative["pricing"] in {"spot", "on_demand", "either"}
        for cls in _as_list(alternative["region"]):
            assert REGION_CLASS.fullmatch(cls), cls
    if "or_fail" in expect:
        assert set(expect["or_fail"]) == {"exit", "message"}


def _documents(entry: Mapping[str, Any]) -> list[Any]:
    return list(yaml.safe_load_all((FILES / entry["file"]).read_text(encoding="utf-8")))


@pytest.mark.parametrize(
    "entry",
    [entry for entry in MANIFEST if len(_documents(entry)) == 1],  # pipelines: several
    ids=lambda e: Path(e["file"]).stem,
)
def test_an_editor_validating_against_the_schema_flags_no_task_file(
    entry: dict[str, Any],
) -> None:
    """`gpulease schema` describes SkyPilot's fields too: every one-document file of the corpus
    validates, those gpulease then refuses included (the schema checks forms, not offers)."""
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(task_json_schema())
    (document,) = _documents(entry)
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(document)]
    assert not errors, errors


def _docker_images() -> list[tuple[str, str]]:
    """(file, image) for each corpus file whose resources.image_id is a docker:… image."""
    found = []
    for entry in MANIFEST:
        for data in yaml.safe_load_all((FILES / entry["file"]).read_text()):
            resources = data.get("resources") if isinstance(data, dict) else None
            image = resources.get("image_id") if isinstance(resources, dict) else None
            if isinstance(image, str) and image.startswith("docker:"):
                found.append((entry["file"], image))
    return found


@pytest.mark.parametrize(("name", "image"), _docker_images())
def test_a_docker_image_id_is_the_task_image_not_ignored(name: str, image: str) -> None:
    from gpulease.spec import load_task_with_warnings

    task, messages = load_task_with_warnings(FILES / name)
    assert task.resources.image_id == image
    assert not any("image_id: ignored" in message for message in messages)
    assert not any("resources.image_id" in message for message in messages[:1])


def test_the_corpus_has_docker_images() -> None:
    assert len(_docker_images()) >= 3
