"""``secrets:`` in a task (issue 20): read in gpulease's and SkyPilot's form, given at launch
(``--secret`` values, the environment), names checked, and no value in any dump, repr, warning
or error — each test with a random canary that must be absent there (and present where the task
needs it: ``get_secret_value()``)."""

from __future__ import annotations

import secrets as random_secrets
import textwrap
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import SecretStr

from gpulease.errors import SpecError
from gpulease.spec import (
    Task,
    dump_task,
    parse_task,
    parse_task_with_warnings,
    task_from_dict_with_warnings,
    task_json_schema,
    with_providers,
)
from gpulease.spec.secret_vars import looks_secret
from gpulease.wire import NODE_VARIABLES
from tests.spec.strategies import examples


def _canary() -> str:
    return random_secrets.token_hex(16)


def _parse(text: str, **kw: Any) -> tuple[Task, list[str]]:
    return parse_task_with_warnings(textwrap.dedent(text), "t.yaml", **kw)


def _values(task: Task) -> dict[str, str | None]:
    return {n: v.get_secret_value() if v else None for n, v in task.secrets.items()}


def _error(text: str, **kw: Any) -> SpecError:
    with pytest.raises(SpecError) as caught:
        _parse(text, **kw)
    return caught.value


def test_the_gpulease_and_skypilot_forms_read_values_and_names_to_give_at_launch() -> None:
    canary = _canary()
    own, said = _parse(f"run: echo\nsecrets:\n  HF_TOKEN: {canary}\n  PIN: 1234\n  WANDB: null\n")
    assert _values(own) == {"HF_TOKEN": canary, "PIN": "1234", "WANDB": None}
    assert isinstance(own.secrets["HF_TOKEN"], SecretStr) and said == []
    sky, said = _parse("resources:\n  cloud: aws\nsecrets:\n  HF_TOKEN: null\n")
    assert sky.secrets == {"HF_TOKEN": None} and not any("secrets" in w for w in said[1:])


def test_launch_values_win_add_names_and_fill_nulls_from_the_environment() -> None:
    file_value, flag, env, added = _canary(), _canary(), _canary(), _canary()
    text = f"run: echo\nsecrets:\n  A: {file_value}\n  B: null\n  C: null\n"
    task, _ = _parse(text, secrets={"A": flag, "D": SecretStr(added)}, environ={"B": env})
    assert _values(task) == {"A": flag, "B": env, "C": None, "D": added}
    error = _error(text, environ={"B": env}, require_envs=True)
    assert (error.field, error.line) == ("secrets.C", 5)
    assert "pass --secret C=… or set C in the environment" in str(error)
    assert not [c for c in (file_value, env) if c in str(error)]


def test_a_value_less_env_gives_way_to_a_secret_of_its_name() -> None:
    canary = _canary()
    task, said = _parse("envs:\n  HF_TOKEN:\nrun: echo\n", secrets={"HF_TOKEN": canary})
    assert task.envs == {} and _values(task) == {"HF_TOKEN": canary} and said == []


@pytest.mark.parametrize(
    ("secrets", "envs", "words"),
    [
        ("'1BAD': {c}", "", "'1BAD' is not a valid environment variable name"),
        ("GPULEASE_TASK_ID: {c}", "", "set by gpulease on every node"),
        ("MASTER_ADDR: {c}", "", "set by gpulease on every node"),
        ("gpulease_mine: {c}", "", "set by gpulease on every node"),
        ("HF_TOKEN: {c}", "envs:\n  HF_TOKEN: x\n", "HF_TOKEN is also in envs"),
        ("HF_TOKEN: [{c}]", "", "expected text, got a list"),
        ("HF_TOKEN: {{k: {c}}}", "", "expected text, got a mapping"),
        ("HF_TOKEN: !!timestamp 2026-13-45{c}", "", "invalid value"),
    ],
)
def test_a_bad_secret_is_an_error_naming_field_and_line_never_the_value(
    secrets: str, envs: str, words: str
) -> None:
    canary = _canary()
    error = _error(f"{envs}run: echo\nsecrets:\n  {secrets.format(c=canary)}\n")
    assert words in str(error) and canary not in str(error), str(error)
    assert error.field is not None and error.field.startswith("secrets")
    assert error.line == envs.count("\n") + 3


def test_a_secrets_field_that_is_no_mapping_names_the_kind_only() -> None:
    canary = _canary()
    error = _error(f"run: echo\nsecrets: {canary}\n")
    assert (error.field, error.line) == ("secrets", 2) and canary not in str(error)
    with pytest.raises(ValueError) as caught:  # a model built in Python: no value either
        Task.model_validate({"secrets": {"A": [canary]}})
    assert canary not in str(caught.value)


def test_every_node_variable_is_refused_as_a_secret_name() -> None:
    for name in NODE_VARIABLES:
        with pytest.raises(SpecError, match="set by gpulease"):
            parse_task(f"secrets:\n  {name}: x\n")


def test_the_node_variables_are_the_ones_the_agent_sets() -> None:
    from gpulease.agent import env

    assert set(env.NODE_VARIABLES) == set(NODE_VARIABLES)  # one list, once agent/env imports it


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("HF_TOKEN", True), ("WANDB_API_KEY", True), ("AWS_ACCESS_KEY_ID", True),
        ("AWS_SECRET_ACCESS_KEY", True), ("db_password", True), ("GITHUB_TOKEN", True),
        ("KEY", True), ("OPENAI_APIKEY", True), ("GOOGLE_APPLICATION_CREDENTIALS", True),
        ("TOKENIZERS_PARALLELISM", False), ("MAX_TOKENS", False), ("MODEL", False),
        ("KEYBOARD", False), ("HF_HOME", False),
    ],
)  # fmt: skip
def test_which_env_names_look_like_secrets(name: str, secret: bool) -> None:
    assert looks_secret(name) is secret


def test_an_env_that_looks_like_a_secret_gets_a_warning_naming_it_never_its_value() -> None:
    canary = _canary()
    task, said = _parse(f"run: echo\nenvs:\n  MODEL: llama\n  HF_TOKEN: {canary}\n")
    assert task.envs["HF_TOKEN"] == canary  # still passed on, as before
    assert said == [
        "t.yaml:4: envs.HF_TOKEN: looks like a secret: give it under secrets: instead, so that "
        "its value stays out of the server's state, views and logs"
    ]


def test_with_providers_keeps_the_values_and_dump_names_secrets_only() -> None:
    canary = _canary()
    task, _ = _parse(f"run: echo\nsecrets:\n  HF_TOKEN: {canary}\n")
    assert _values(with_providers(task, ["local"])) == {"HF_TOKEN": canary}
    assert dump_task(task) == "run: echo\nsecrets:\n  HF_TOKEN: null\n"
    assert parse_task(dump_task(task)).secrets == {"HF_TOKEN": None}
    assert "secrets" in task_json_schema()["properties"]


_NAMES = st.from_regex(r"[A-Z][A-Z0-9_]{0,11}", fullmatch=True).filter(
    lambda n: not n.startswith("GPULEASE_") and n not in NODE_VARIABLES
)


@examples(40)
@given(
    names=st.lists(_NAMES, min_size=1, max_size=4, unique=True),
    extra=st.dictionaries(st.sampled_from(["run", "setup", "name"]), st.text(max_size=8)),
    nulls=st.lists(st.booleans(), min_size=4, max_size=4),
)
def test_no_dump_of_a_task_with_secrets_holds_a_value(
    names: list[str], extra: dict[str, str], nulls: list[bool]
) -> None:
    values = {n: None if null else _canary() for n, null in zip(names, nulls, strict=False)}
    task, _ = task_from_dict_with_warnings({**extra, "secrets": values})
    assert _values(task) == values  # the task itself has them...
    dumps = [
        str(task.model_dump()),
        str(task.model_dump(by_alias=True, exclude_defaults=True)),
        str(task.model_dump(mode="json", by_alias=True, exclude_defaults=True)),
        task.model_dump_json(),
        dump_task(task),
        repr(task),
        str(task),
        str(task.model_copy(update={"run": "x"}).model_dump()),
    ]
    kept = [v for v in values.values() if v is not None]
    assert not [v for v in kept for text in dumps if v in text]  # ...no dump does
    assert task.model_dump()["secrets"] == dict.fromkeys(names)
