"""The ``providers.slurm`` config section, validated (:class:`SlurmSettings`).

Every field is optional; a wrong one raises :class:`~gpulease.errors.UserInputError` naming it
(``providers.slurm.<field>: …``). See ``docs/slurm.md``. Moves no states.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from gpulease.errors import UserInputError
from gpulease.providers.fields import optional_text, text

WHERE = "providers.slurm"
_text = partial(text, WHERE)
_optional_text = partial(optional_text, WHERE)
_KNOWN = {
    "slurm_conf", "partitions", "account", "qos", "sbatch_options", "price_per_gpu_hour",
    "login", "ssh_options", "root", "agent_host", "accelerator", "rest_url", "rest_user",
    "rest_token_env",
}  # fmt: skip
_URL = re.compile(r"^https?://[A-Za-z0-9.\[\]:_-]+(:[0-9]{1,5})?(/[^\s]*)?$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SSH = re.compile(r"^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+$")


@dataclass(frozen=True, slots=True)
class SlurmSettings:
    """``slurm_conf``: the cluster's slurm.conf (default ``$SLURM_CONF``); ``partitions``: the
    partitions to use (empty: all that ``sinfo`` shows); ``account`` / ``qos``: passed to
    sbatch; ``sbatch_options``: extra sbatch flags; ``price_per_gpu_hour``: the internal rate the
    optimizer sees; ``login``: ``local`` (the Slurm commands run here) or ``ssh: user@host``
    (they run on a login node over ssh; ``ssh_options``: extra ssh flags such as ``-p``/``-i``;
    an explicit ``slurm_conf`` is passed as ``SetEnv=SLURM_CONF``, which the login node's sshd
    must ``AcceptEnv``); ``root``: the shared directory for node dirs (None: the provider's
    own); ``agent_host``: the address agents bind; ``accelerator``: the GPU model of gres entries
    that name no type; ``rest_url``: slurmrestd's base URL (``http(s)://host:port``; set, the
    provider talks to slurmrestd instead of running the commands); ``rest_user``: the
    ``X-SLURM-USER-NAME`` it sends (default ``root``); ``rest_token_env``: the NAME of the
    environment variable holding the JWT (default ``SLURM_JWT``; the token itself never goes in
    the config)."""

    slurm_conf: str | None = None
    partitions: tuple[str, ...] = ()
    account: str | None = None
    qos: str | None = None
    sbatch_options: tuple[str, ...] = ()
    price_per_gpu_hour: float = 0.0
    login: str = "local"
    ssh: str | None = None
    ssh_options: tuple[str, ...] = ()
    root: str | None = None
    agent_host: str = "127.0.0.1"
    accelerator: str = "T4"
    rest_url: str | None = None
    rest_user: str = "root"
    rest_token_env: str = "SLURM_JWT"

    @classmethod
    def from_mapping(cls, section: Mapping[str, Any] | None) -> SlurmSettings:
        data = dict(section or {})
        unknown = sorted(set(data) - _KNOWN)
        if unknown:
            raise UserInputError(f"{WHERE}.{unknown[0]}: unknown setting (known: {sorted(_KNOWN)})")
        login, ssh = _login(data.get("login", "local"))
        rest_url = _rest_url(data.get("rest_url"))
        sbatch_options = _texts(data.get("sbatch_options"), "sbatch_options")
        if rest_url is not None and sbatch_options:
            raise UserInputError(f"{WHERE}.sbatch_options: not supported with rest_url")
        return cls(
            slurm_conf=_optional_text(
                data.get("slurm_conf", os.environ.get("SLURM_CONF")), "slurm_conf"
            ),
            partitions=_texts(data.get("partitions"), "partitions"),
            account=_optional_text(data.get("account"), "account"),
            qos=_optional_text(data.get("qos"), "qos"),
            sbatch_options=sbatch_options,
            price_per_gpu_hour=_price(data.get("price_per_gpu_hour", 0.0)),
            login=login,
            ssh=ssh,
            ssh_options=_texts(data.get("ssh_options"), "ssh_options"),
            root=_optional_text(data.get("root"), "root"),
            agent_host=_text(data.get("agent_host", "127.0.0.1"), "agent_host"),
            accelerator=_text(data.get("accelerator", "T4"), "accelerator"),
            rest_url=rest_url,
            rest_user=_text(data.get("rest_user", "root"), "rest_user"),
            rest_token_env=_env_name(data.get("rest_token_env", "SLURM_JWT")),
        )


def _texts(value: Any, name: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise UserInputError(f"{WHERE}.{name}: expected a list of strings, got {value!r}")
    return tuple(_text(v, name) for v in value)


def _price(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise UserInputError(f"{WHERE}.price_per_gpu_hour: expected a number >= 0, got {value!r}")
    return float(value)


def _login(value: Any) -> tuple[str, str | None]:
    if value == "local":
        return "local", None
    if isinstance(value, Mapping) and set(value) == {"ssh"}:
        target = value["ssh"]
        if isinstance(target, str) and _SSH.match(target):
            return "ssh", target
    raise UserInputError(f"{WHERE}.login: expected 'local' or {{ssh: user@host}}, got {value!r}")


def _rest_url(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not _URL.match(value.strip()):
        raise UserInputError(
            f"{WHERE}.rest_url: expected an http(s) URL like http://host:6820, got {value!r}"
        )
    return value.strip().rstrip("/")


def _env_name(value: Any) -> str:
    if not isinstance(value, str) or not _ENV_NAME.match(value):
        raise UserInputError(
            f"{WHERE}.rest_token_env: expected an environment variable name, got {value!r}"
        )
    return value
