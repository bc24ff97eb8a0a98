"""The pre-pass between YAML and the models: alternative spellings and SkyPilot task YAML.

:func:`normalize` takes the plain data of a task file and returns data in gpulease's own field
names, ready for :class:`~gpulease.spec.models.Task`, together with

- ``renames``: where each moved or renamed field came from (``resources.providers`` ←
  ``resources.cloud``), so that a later validation error names the field and line the user wrote;
- ``warnings``: one line per field that is read but not honoured, each with its file and line;
- ``skypilot``: the SkyPilot-only fields found (non-empty when the file is read as SkyPilot YAML).

It owns the mapping of SkyPilot's fields (``cloud``, ``infra``, ``zone``, ``disk_size``,
``max_hourly_cost``, ``resources.job_recovery``, …; ``any_of``/``ordered`` through
:mod:`gpulease.spec.candidates`; ``service:`` and ``pool:`` through
:mod:`gpulease.spec.skypilot_serve`) and what a name without a count means (one GPU, unless the task
has a workload to size); values are checked later by the models. It never mutates its input.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpulease.errors import SpecError
from gpulease.spec.accelerators import format_accelerators, parse_accelerators
from gpulease.spec.candidates import RES, merge_candidates
from gpulease.spec.env_values import missing_env_hint
from gpulease.spec.images import translate_image_id
from gpulease.spec.secret_vars import looks_secret, secret_name_problem, secret_value
from gpulease.spec.skypilot_serve import translate_pool, translate_service
from gpulease.spec.yaml_lines import Document, Path, format_path

__all__ = ["Normalized", "normalize"]

_RES = RES

_IGNORED_TOP = {
    "managed_secrets": "not supported; list the task's secrets under secrets:",
    "config": "SkyPilot config overrides do not apply",
    "volumes": "volumes are not supported",
    "volume_mounts": "volumes are not supported",
    "inputs": "not used",
    "outputs": "not used",
    "event_callback": "not supported",
    "file_mounts_mapping": "not used",
    "api_server_access": "not used",
}
_IGNORED_RESOURCES = {
    "labels": "instance labels are not supported",
    "local_disk": "local disk selection is not supported",
    "ephemeral_storage": "not supported",
    "accelerator_args": "TPU arguments are not supported",
    "priority": "not supported",
    "priority_class": "not supported",
    "volumes": "volumes are not supported",
}
_NATIVE_RENAMES = {"provider": "providers", "region": "regions", "zone": "zones"}
_SKYPILOT_RENAMES = {"disk_size": "disk", "max_hourly_cost": "max_price_per_hour"}


@dataclass
class Normalized:
    """Task data in gpulease's field names, and what the translation noticed."""

    data: dict[Any, Any]
    renames: dict[Path, Path] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    skypilot: list[Path] = field(default_factory=list)

    def origin(self, path: Path) -> Path:
        """The path the user wrote for ``path`` in the normalized data."""
        for end in range(len(path), 0, -1):
            if path[:end] in self.renames:
                return self.renames[path[:end]] + path[end:]
        return path


class Pass:
    """One normalization: the document, the result and helpers to warn, fail and move fields."""

    def __init__(self, doc: Document, data: dict[Any, Any]) -> None:
        self.doc = doc
        self.out = Normalized(data)
        self.pending: list[tuple[int, str]] = []  # (line, warning), sorted at the end

    def fail(self, path: Path, message: str) -> SpecError:
        return self.doc.error(self.out.origin(path), message)

    def warn(self, path: Path, message: str) -> None:
        self.pending.append((self.doc.line(path) or 0, str(self.doc.error(path, message))))

    def skypilot_field(self, path: Path) -> None:
        if path not in self.out.skypilot:
            self.out.skypilot.append(path)

    def ignore(self, path: Path, why: str) -> None:
        self.skypilot_field(path)
        self.warn(path, f"ignored (SkyPilot field that gpulease does not honour: {why})")

    def put(self, into: dict[Any, Any], at: Path, key: str, value: Any, origin: Path) -> None:
        """Set ``into[key]``, remembering that it came from ``origin``; refuse a second source."""
        if key in into:
            first = self.out.origin((*at, key))
            raise self.doc.error(
                origin, f"conflicts with {format_path(first)} (both set {key}); give one"
            )
        into[key] = value
        if origin != (*at, key):
            self.out.renames[(*at, key)] = origin


_SECTIONS = ("resources", "workload", "checkpoint", "job_recovery")


def _without_nulls(data: dict[Any, Any]) -> dict[Any, Any]:
    """``deadline:`` or ``resources:`` left empty means the default, as if the field were absent."""
    pruned = {key: value for key, value in data.items() if value is not None}
    for key in _SECTIONS:
        if isinstance(pruned.get(key), dict):
            pruned[key] = {k: v for k, v in pruned[key].items() if v is not None}
    workload = pruned.get("workload")
    if isinstance(workload, dict) and isinstance(workload.get("model"), dict):
        workload["model"] = {k: v for k, v in workload["model"].items() if v is not None}
    return pruned


def normalize(doc: Document) -> Normalized:
    """Translate ``doc.data`` (a mapping) into gpulease field names; see the module docstring."""
    step = Pass(doc, _without_nulls(dict(doc.data)))
    data = step.out.data
    _top_level(step, data)
    if isinstance(data.get("resources"), dict):
        data["resources"] = _resources(step, dict(data["resources"]), data)
        translate_image_id(step, data["resources"])
    step.out.warnings = [warning for _, warning in sorted(step.pending, key=lambda item: item[0])]
    if step.out.skypilot:
        found = ", ".join(format_path(path) for path in step.out.skypilot)
        notice = f"read as a SkyPilot task (SkyPilot fields: {found})"
        step.out.warnings.insert(0, f"{doc.source}: {notice}" if doc.source else notice)
    return step.out


# --- top level -----------------------------------------------------------------------------------


def _top_level(step: Pass, data: dict[Any, Any]) -> None:
    for key in list(data):
        if key in _IGNORED_TOP or (isinstance(key, str) and key.startswith("_")):
            step.ignore((key,), _IGNORED_TOP.get(key, "internal field"))
            del data[key]
    if isinstance(data.get("workdir"), dict):
        step.ignore(("workdir",), "a git workdir ({url, ref}) is not supported; give a directory")
        del data["workdir"]
    if isinstance(data.get("file_mounts"), dict):
        data["file_mounts"] = _file_mounts(step, data["file_mounts"])
    if isinstance(data.get("secrets"), dict):
        data["secrets"] = _secrets(step, data["secrets"], data.get("envs"))
    if isinstance(data.get("envs"), dict):
        data["envs"] = _envs(step, data["envs"])
    translate_service(step, data)
    translate_pool(step, data)


def _file_mounts(step: Pass, mounts: dict[Any, Any]) -> dict[Any, Any]:
    kept = {}
    for target, source in mounts.items():
        if isinstance(source, dict):
            step.ignore(("file_mounts", target), "storage mounts are not supported")
        else:
            kept[target] = source
    return kept


def _secrets(step: Pass, secrets: dict[Any, Any], envs: Any) -> dict[Any, Any]:
    """Names checked (``secrets.NAME`` and its line in the error), values wrapped in SecretStr at
    once, so that no later error or repr shows one; null stays (given at launch)."""
    kept = {}
    for name, value in secrets.items():
        problem = secret_name_problem(name, envs if isinstance(envs, dict) else ())
        if problem is not None:
            raise step.fail(("secrets", name), problem)
        try:
            kept[name] = secret_value(value)
        except ValueError as exc:
            raise step.fail(("secrets", name), str(exc)) from None
    return kept


_LOOKS_SECRET = (
    "looks like a secret: give it under secrets: instead, so that its value stays out of the "
    "server's state, views and logs"
)


def _envs(step: Pass, envs: dict[Any, Any]) -> dict[Any, Any]:
    """Envs without a value are left out (with a warning saying how to give one); one whose
    name looks like a secret's gets a warning pointing to ``secrets:`` — one warning per env,
    naming it, never its value."""
    kept = {}
    for name, value in envs.items():
        notes = [_LOOKS_SECRET] if looks_secret(name) else []
        if value is None:
            notes.insert(0, f"has no value and is left out ({missing_env_hint(name)})")
        else:
            kept[name] = value
        if notes:
            step.warn(("envs", name), "; it ".join(notes))
    return kept


# --- resources -----------------------------------------------------------------------------------


def _resources(step: Pass, res: dict[Any, Any], task: dict[Any, Any]) -> dict[Any, Any]:
    if "any_of" in res and "ordered" in res:
        raise step.fail((*_RES, "ordered"), "give either any_of or ordered, not both")
    bare = _bare_count(task)
    for key in ("any_of", "ordered"):
        if key in res:
            step.skypilot_field((*_RES, key))
            res = merge_candidates(step, res, key, bare, _resource_field)
    origins = {key: step.out.origin((*_RES, key)) for key in res}  # before any field moves
    out: dict[Any, Any] = {}
    for key, value in res.items():
        _resource_field(step, out, task, (key, value), origins[key])
    _accelerator_counts(step, out, bare, (*_RES, "accelerators"))
    if isinstance(out.get("candidates"), list):
        for index, candidate in enumerate(out["candidates"]):
            if isinstance(candidate, dict):
                where = (*_RES, "candidates", index, "accelerators")
                _accelerator_counts(step, candidate, bare, where)
    _no_kubernetes_yet(step, out)
    return out


def _no_kubernetes_yet(step: Pass, res: dict[Any, Any]) -> None:
    providers = res.get("providers")
    names = [providers] if isinstance(providers, str) else providers
    if isinstance(names, list) and any(
        isinstance(name, str) and name.strip().lower() in ("k8s", "kubernetes") for name in names
    ):
        step.warn(
            step.out.origin((*_RES, "providers")),
            "gpulease has no Kubernetes provider yet: no plan runs on kubernetes",
        )


def _resource_field(
    step: Pass, out: dict[Any, Any], task: dict[Any, Any], item: tuple[Any, Any], origin: Path
) -> None:
    """Move one field of ``resources`` (written at ``origin``) into ``out`` under its own name."""
    key, value = item
    if key in _NATIVE_RENAMES:
        step.put(out, _RES, _NATIVE_RENAMES[key], value, origin)
    elif key in _SKYPILOT_RENAMES:
        step.skypilot_field(origin)
        step.put(out, _RES, _SKYPILOT_RENAMES[key], value, origin)
    elif key in ("cloud", "infra"):
        step.skypilot_field(origin)
        _location(step, out, key, value, origin)
    elif key in ("job_recovery", "spot_recovery"):
        step.skypilot_field(origin)
        step.put(task, (), "job_recovery", _job_recovery(step, value, origin), origin)
    elif key == "autostop":
        step.put(out, _RES, key, _autostop(step, value, origin), origin)
    elif key in _IGNORED_RESOURCES or (isinstance(key, str) and key.startswith("_")):
        step.ignore(origin, _IGNORED_RESOURCES.get(key, "internal field"))
    else:
        step.put(out, _RES, key, value, origin)


def _location(step: Pass, out: dict[Any, Any], key: str, value: Any, origin: Path) -> None:
    """``cloud: aws`` or ``infra: aws/us-east-1[/us-east-1a]`` → providers (and regions)."""
    if not isinstance(value, str) or not value.strip():
        raise step.doc.error(origin, f"expected a name such as aws or aws/us-east-1, got {value!r}")
    if key == "cloud":
        step.put(out, _RES, "providers", value, origin)
        return
    cloud, _, rest = value.strip().partition("/")
    if cloud.lower() in ("k8s", "kubernetes"):
        step.put(out, _RES, "providers", "kubernetes", origin)
        if rest:
            step.warn(origin, f"kubernetes context {rest!r} is ignored")
        return
    region, _, zone = rest.partition("/")
    if cloud != "*":
        step.put(out, _RES, "providers", cloud, origin)
    if region and region != "*":
        step.put(out, _RES, "regions", region, origin)
    if zone:
        step.put(out, _RES, "zones", zone, origin)


def _job_recovery(step: Pass, value: Any, origin: Path) -> Any:
    """SkyPilot's ``{strategy, max_restarts_on_errors, recover_on_exit_codes}``."""
    if not isinstance(value, dict):
        return value
    value = dict(value)
    if value.get("strategy", "") is None:
        del value["strategy"]
    if "recover_on_exit_codes" in value:
        del value["recover_on_exit_codes"]
        step.warn((*origin, "recover_on_exit_codes"), "ignored (not supported)")
    return value


_AUTOSTOP_IGNORED = {
    "wait_for": "gpulease counts idleness from the task and the GPUs' load",
    "hook": "no hook runs before autostop",
    "hook_timeout": "no hook runs before autostop",
}


def _autostop(step: Pass, value: Any, origin: Path) -> Any:
    """SkyPilot's ``{idle_minutes, down, wait_for, hook, hook_timeout}``: the last three are
    dropped with a warning; ``gpu_utilization_below`` is spelled ``gpu_utilisation_below``; the
    forms are read by :mod:`gpulease.spec.autostop`."""
    if not isinstance(value, dict):
        return value
    kept = dict(value)
    if "gpu_utilization_below" in kept:  # the US spelling, kept in errors as the user wrote it
        spelled = kept.pop("gpu_utilization_below")
        at = (*_RES, "autostop")
        step.put(kept, at, "gpu_utilisation_below", spelled, (*origin, "gpu_utilization_below"))
    for key, why in _AUTOSTOP_IGNORED.items():
        if key in kept:
            del kept[key]
            step.skypilot_field((*origin, key))
            step.warn(
                (*origin, key), f"ignored (SkyPilot field that gpulease does not honour: {why})"
            )
    return kept


# --- accelerator counts ---------------------------------------------------------------------------


def _bare_count(data: dict[Any, Any]) -> int | None:
    """What a name without a count means: one GPU (SkyPilot's meaning), unless the task has a
    workload for the optimizer to size (then None)."""
    return None if data.get("workload") is not None else 1


def _accelerator_counts(step: Pass, res: dict[Any, Any], bare: int | None, path: Path) -> None:
    """Write ``resources.accelerators`` with every count explicit (``:1``, ``:auto``)."""
    value = res.get("accelerators")
    if value is None or (isinstance(value, dict) and ("options" in value or "choices" in value)):
        return  # absent, or the internal form of model_dump()
    try:
        options, ordered = parse_accelerators(value, bare=bare)
    except ValueError as exc:
        raise step.fail(path, str(exc)) from None
    res["accelerators"] = format_accelerators(options, ordered)
