"""``--env`` and ``--env-file`` of ``launch``, ``jobs launch`` and ``plan``, and ``--secret`` of
the launching commands (``launch``, ``jobs launch``, ``serve up|update``, ``pool up``): values for
the task's ``envs`` and ``secrets`` given at launch, as SkyPilot's options give them.

- ``--env NAME=VALUE`` sets ``NAME`` (over the file's value, as SkyPilot does); ``--env NAME``
  takes ``NAME`` from the environment of the ``gpulease`` command (unset there: exit 2);
  repeatable.
- ``--env-file FILE``: a dotenv file (``NAME=VALUE`` lines, ``export``, quotes and comments as
  python-dotenv reads them; a line ``NAME`` alone takes ``NAME`` from the environment); ``--env``
  wins over it.

- ``--secret NAME=VALUE`` sets the secret ``NAME`` (over the file's value; a name the file's
  ``secrets:`` does not list is added, as SkyPilot does); ``--secret NAME`` takes it from the
  environment of the ``gpulease`` command (unset there: exit 2); repeatable. The values stay
  :class:`~pydantic.SecretStr` from here to the request's own ``secrets`` field.

An env or secret the file lists without a value (``HF_TOKEN:``) and no option gives is looked up
in the environment by the spec (:mod:`gpulease.spec.env_values`,
:mod:`gpulease.spec.secret_vars`). The values are often secrets: no message here contains one,
only names. Moves no states.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpulease.errors import UserInputError

if TYPE_CHECKING:
    from pydantic import SecretStr

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

EnvOption = Annotated[
    list[str] | None,
    typer.Option(
        "--env",
        metavar="NAME[=VALUE]",
        help="Set the task's env NAME (repeatable; over the file's value); NAME alone takes it "
        "from this environment. Needed for envs the file lists without a value.",
    ),
]
EnvFileOption = Annotated[
    Path | None,
    typer.Option(
        "--env-file",
        metavar="FILE",
        help="A dotenv file of NAME=VALUE lines for the task's envs (--env wins over it).",
    ),
]


SecretOption = Annotated[
    list[str] | None,
    typer.Option(
        "--secret",
        metavar="NAME[=VALUE]",
        help="Set the task's secret NAME (repeatable; over the file's value; a name its secrets: "
        "do not list is added); NAME alone takes it from this environment (preferred: a value "
        "on the command line shows in the process list and shell history).",
    ),
]


def secret_overrides(
    pairs: list[str] | None, environ: Mapping[str, str] | None = None
) -> dict[str, SecretStr]:
    """The secrets ``--secret`` gives (a later one wins); ``environ`` (default: this process's
    environment) answers ``--secret NAME``."""
    if not pairs:
        return {}
    from pydantic import SecretStr  # lazy: the CLI starts without pydantic

    environ = os.environ if environ is None else environ
    found: dict[str, SecretStr] = {}
    for item in pairs:
        name, has_value, value = item.partition("=")
        if not _NAME.match(name):  # not echoed: it may be a value given without its name
            raise UserInputError(
                "--secret: expected NAME=VALUE or NAME (an environment variable name: letters, "
                "digits and _, not starting with a digit)"
            )
        found[name] = SecretStr(value if has_value else _from_environ(name, environ, "--secret"))
    return found


def env_overrides(
    pairs: list[str] | None,
    env_file: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The envs ``--env-file`` and ``--env`` give, ``--env`` last (it wins); ``environ``
    (default: this process's environment) answers ``--env NAME``."""
    environ = os.environ if environ is None else environ
    found: dict[str, str] = {}
    if env_file is not None:
        found.update(_env_file(env_file, environ))
    for item in pairs or ():
        name, has_value, value = item.partition("=")
        _check_name(name, "--env")
        if not has_value:
            value = _from_environ(name, environ, "--env")
        found[name] = value
    return found


def _check_name(name: str, option: str) -> None:
    if not _NAME.match(name):
        raise UserInputError(
            f"{option}: {name!r} is not an environment variable name; give NAME=VALUE or NAME"
        )


def _from_environ(name: str, environ: Mapping[str, str], option: str) -> str:
    if name not in environ:
        raise UserInputError(
            f"{option} {name}: {name} is not set in the environment; give {option} {name}=VALUE"
        )
    return environ[name]


def _env_file(path: Path, environ: Mapping[str, str]) -> dict[str, str]:
    from dotenv import dotenv_values

    option = f"--env-file {path}"
    try:
        with open(path, encoding="utf-8") as stream:
            values = dotenv_values(stream=stream)
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise UserInputError(f"{option}: cannot read it: {reason}") from None
    found: dict[str, str] = {}
    for name, value in values.items():
        _check_name(name, option)
        found[name] = _from_environ(name, environ, option) if value is None else value
    return found
