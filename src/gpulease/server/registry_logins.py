"""The server's registry logins: which configured credential pulls a task's image, read from
the server process's environment, and the launch-time check that it can be read.

Owns :class:`RegistryLogins`: the config's ``containers.registries`` entries (names only, see
:func:`gpulease.config.registry_entries`) and the environment their ``password_env`` variables
are read from — the **server's** process environment (an auto-started server inherits the
environment of the command that started it), read when it is needed: at each launch
(:meth:`RegistryLogins.check_launch`, so a missing variable refuses the launch before anything
is written) and before each submission of a task with an image to a node
(:meth:`RegistryLogins.credential`, :class:`gpulease.server.agents.HttpAgent`), which sends the
login to that node's agent (``PUT /v1/registries/<host>``) over the channel the task goes
through. The secret is never stored, logged or put in a message; errors name the registry and
the variable only. Moves no states.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from gpulease.config import RegistryCredential, RegistryEntry, resolve_credential
from gpulease.errors import Permanent, UserInputError
from gpulease.wire import RunSpec


class RegistryLoginMissing(Permanent):
    """A configured registry's password variable is unset where the server runs."""


class RegistryLogins:
    """``entries``: the configured registries by host; ``environ``: where their passwords are
    read (default: this process's environment, read at each use)."""

    def __init__(
        self,
        entries: Mapping[str, RegistryEntry] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.entries: Mapping[str, RegistryEntry] = dict(entries or {})
        self._environ = environ

    @property
    def environ(self) -> Mapping[str, str]:
        return os.environ if self._environ is None else self._environ

    def credential(self, registry: str | None) -> RegistryCredential | None:
        """The login for ``registry`` (None: no entry, an anonymous pull); an entry whose
        variable is unset raises :class:`RegistryLoginMissing` naming the variable."""
        if registry is None:
            return None
        try:
            return resolve_credential(self.entries, registry, self.environ)
        except UserInputError as exc:
            raise RegistryLoginMissing(f"{exc} in the server's environment") from None

    def check_launch(self, run: RunSpec) -> None:
        """Refuse (:class:`~gpulease.errors.UserInputError`, exit code 2) a task whose image
        comes from a configured registry whose password variable is unset."""
        if run.image is None or run.image_registry is None:
            return
        try:
            resolve_credential(self.entries, run.image_registry, self.environ)
        except UserInputError as exc:
            raise UserInputError(
                f"resources.image_id: {run.image} is pulled from {run.image_registry} with the "
                f"configured login, but {exc}: set it in the environment the gpulease server "
                "runs in (restart the server after setting it) and launch again"
            ) from None
