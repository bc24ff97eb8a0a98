"""SkyPilot's ``service:`` (SkyServe) and ``pool:`` sections, mapped onto gpulease's.

Runs inside the normalization pass (:mod:`gpulease.spec.normalize`) on the top-level data, before
validation by :class:`~gpulease.spec.service.ServiceSpec` / :class:`~gpulease.spec.pool.PoolSpec`.
Every moved field is recorded as a rename, so a validation error names what the user wrote
(``service.replica_policy.max_replicas``, with its line). The mapping (docs/spec.md has the table):

- ``service.readiness_probe``: ``initial_delay_seconds`` → ``initial_delay``, ``timeout_seconds``
  → ``timeout`` (a path string and ``post_data`` are read as they are);
- ``service.replica_policy``: ``min_replicas`` / ``max_replicas`` → ``replicas.min`` / ``max``;
  ``target_qps_per_replica`` → ``autoscale`` with metric ``qps`` and that target;
  ``upscale_delay_seconds`` / ``downscale_delay_seconds`` → ``autoscale.up.for`` / ``down.for``;
  ``base_ondemand_fallback_replicas`` → ``spot.on_demand_base``; ``dynamic_ondemand_fallback``
  (gpulease always falls back to on-demand while spot is unavailable);
- ``service.ports`` → ``service.port``;
- a service whose ``resources.use_spot`` is true (or that names a fallback) and has no ``spot:``
  runs its replicas above the on-demand base on spot (``spot_share: 1``), as SkyServe does;
- ``pool: {workers: N}`` (SkyPilot 0.14) → ``min_nodes = max_nodes = N``; ``min_workers`` /
  ``max_workers`` → ``min_nodes`` / ``max_nodes``; ``downscale_delay_seconds`` → ``idle_timeout``.

Fields without a meaning here are dropped with a warning naming the field and why. Empty fields
(``timeout:``) mean the default, as elsewhere in a task. Never mutates its input; moves no states.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpulease.spec.yaml_lines import Path

if TYPE_CHECKING:
    from gpulease.spec.normalize import Pass

__all__ = ["add_serve_schema", "translate_pool", "translate_service"]

_SVC: Path = ("service",)
_AUTOSCALE: Path = ("service", "autoscale")
_POOL: Path = ("pool",)

_IGNORED_SERVICE = {
    "tls": "the endpoint is plain HTTP on the gpulease server's host",
    "load_balancer": "the load balancer's timeouts are not configurable",
    "pool": "a service is not a pool; a pool file has pool: at the top level",
    "workers": "a service is not a pool; a pool file has pool: at the top level",
}
_SAME_BALANCING = {"least_load", "least_requests", "least_connections"}
_IGNORED_PROBE = {
    "headers": "the probe sends no custom headers",
    "endpoint_probe_interval_seconds": "replicas are probed on the services loop's own interval",
    "consecutive_failure_threshold_timeout": "a replica failing its probe is replaced after a "
    "bounded number of tries",
}
_IGNORED_POLICY = {
    "num_overprovision": "no replicas are kept beyond what the autoscaler asks for",
    "spot_placer": "gpulease's optimizer chooses where spot replicas run",
    "spot_zones": "limit where replicas run with resources.zones or any_of",
    "spot_policy": "the spot mix is service.spot",
    "spot_mixer": "the spot mix is service.spot",
    "init_replicas": "a service starts at replicas.min",
    "num_init_replicas": "a service starts at replicas.min",
    "num_extra": "no replicas are kept beyond what the autoscaler asks for",
}
_IGNORED_POOL = {
    "upscale_delay_seconds": "the pool grows as soon as a job waits",
    "queue_length_threshold": "the pool grows as soon as a job waits",
}
_POOL_SAME = {"upscale_delay_seconds": 0, "queue_length_threshold": 1}
_SPOT_WORDS = {"true", "yes", "on"}


def _pruned(value: Any) -> Any:
    """``value`` without keys left empty (they mean the default); JSON bodies are kept whole."""
    if not isinstance(value, dict):
        return value
    return {
        key: item if key == "post_data" else _pruned(item)
        for key, item in value.items()
        if item is not None
    }


def _ignore(step: Pass, path: Path, why: str) -> None:
    step.skypilot_field(path)
    step.warn(path, f"ignored (SkyPilot field that gpulease does not honour: {why})")


# --- service -------------------------------------------------------------------------------------


def translate_service(step: Pass, data: dict[Any, Any]) -> None:
    """Rewrite ``data["service"]`` (if a mapping) in gpulease's field names; see the module."""
    if not isinstance(data.get("service"), dict):
        return
    service = _pruned(data["service"])
    _one_spot_mix(step, service)
    out: dict[Any, Any] = {}
    for key, value in service.items():
        where = (*_SVC, key)
        if key == "replica_policy":
            step.skypilot_field(where)
            _replica_policy(step, out, value, where)
        elif key == "readiness_probe":
            step.put(out, _SVC, key, _probe(step, value, where), where)
        elif key == "ports":
            step.skypilot_field(where)
            step.put(out, _SVC, "port", value, where)
        elif key == "load_balancing_policy":
            _balancing(step, value, where)
        elif key in _IGNORED_SERVICE:
            _ignore(step, where, _IGNORED_SERVICE[key])
        else:
            step.put(out, _SVC, key, value, where)
    _spot_mix(step, out, service, data.get("resources"))
    data["service"] = out


def _one_spot_mix(step: Pass, service: dict[Any, Any]) -> None:
    policy = service.get("replica_policy")
    if "spot" not in service or not isinstance(policy, dict):
        return
    for key in ("base_ondemand_fallback_replicas", "dynamic_ondemand_fallback"):
        if key in policy:
            raise step.fail((*_SVC, "replica_policy", key), "conflicts with service.spot; give one")


def _balancing(step: Pass, value: Any, where: Path) -> None:
    step.skypilot_field(where)
    if not (isinstance(value, str) and value.strip().lower() in _SAME_BALANCING):
        step.warn(
            where,
            "ignored (SkyPilot field that gpulease does not honour: the load balancer always "
            "sends each request to the ready replica with the fewest in flight)",
        )


def _probe(step: Pass, value: Any, path: Path) -> Any:
    """SkyPilot's ``{path, initial_delay_seconds, timeout_seconds, post_data, headers}``."""
    if not isinstance(value, dict):
        return value  # a path string, or a wrong type for the model to name
    renames = {"initial_delay_seconds": "initial_delay", "timeout_seconds": "timeout"}
    out: dict[Any, Any] = {}
    for key, item in value.items():
        where = (*path, key)
        if key in renames:
            step.skypilot_field(where)
            step.put(out, path, renames[key], item, where)
        elif key in _IGNORED_PROBE:
            _ignore(step, where, _IGNORED_PROBE[key])
        else:
            step.put(out, path, key, item, where)
    return out


def _replica_policy(step: Pass, out: dict[Any, Any], policy: Any, path: Path) -> None:
    """SkyServe's ``replica_policy`` → ``replicas``, ``autoscale`` and ``spot`` in ``out``."""
    if not isinstance(policy, dict):
        raise step.fail(
            path,
            "expected a mapping such as {min_replicas: 1, max_replicas: 4, "
            f"target_qps_per_replica: 2}}, got {policy!r}",
        )
    replicas: dict[Any, Any] = {}
    autoscale: dict[Any, Any] = {}
    moves = {
        "min_replicas": (replicas, ("replicas",), "min"),
        "max_replicas": (replicas, ("replicas",), "max"),
        "upscale_delay_seconds": (autoscale.setdefault("up", {}), ("autoscale", "up"), "for"),
        "downscale_delay_seconds": (autoscale.setdefault("down", {}), ("autoscale", "down"), "for"),
    }
    for key, value in policy.items():
        where = (*path, key)
        if key in moves:
            into, at, name = moves[key]
            step.put(into, (*_SVC, *at), name, value, where)
        elif key == "target_qps_per_replica":
            step.put(autoscale, _AUTOSCALE, "metric", "qps", where)
            step.put(autoscale, _AUTOSCALE, "target_per_replica", _qps(step, value, where), where)
        elif key == "base_ondemand_fallback_replicas":
            step.put(out.setdefault("spot", {}), (*_SVC, "spot"), "on_demand_base", value, where)
        elif key == "dynamic_ondemand_fallback":
            if value is False:
                step.warn(where, "gpulease always falls back to on-demand while spot is short")
        else:
            why = _IGNORED_POLICY.get(key, "not a replica_policy field gpulease knows")
            _ignore(step, where, why)
    autoscale = {key: value for key, value in autoscale.items() if value != {}}
    _autoscale_notes(step, replicas, autoscale, path)
    step.put(out, _SVC, "replicas", replicas, path)
    if autoscale:
        step.put(out, _SVC, "autoscale", autoscale, path)


def _qps(step: Pass, value: Any, where: Path) -> Any:
    """SkyPilot's per-accelerator targets ``{H100: 5, A100: 2}``: the lowest one is used."""
    if not isinstance(value, dict) or not value:
        return value
    numbers = [item for item in value.values() if isinstance(item, int | float)]
    if len(numbers) != len(value) or any(isinstance(item, bool) for item in numbers):
        return value  # the model names the bad value
    step.warn(where, f"one target for every replica: the lowest, {min(numbers):g} per second")
    return min(numbers)


def _autoscale_notes(
    step: Pass, replicas: dict[Any, Any], autoscale: dict[Any, Any], path: Path
) -> None:
    """Say how a policy SkyServe itself would refuse is read."""
    low, high = replicas.get("min"), replicas.get("max")
    if "metric" not in autoscale and high is not None and high != low:
        step.warn(
            path,
            "no target_qps_per_replica: replicas scale by load (requests in flight per "
            "replica) with the default target",
        )
    if "metric" in autoscale and high is None:
        step.warn(path, "no max_replicas: the service stays at min_replicas")


def _spot_mix(step: Pass, out: dict[Any, Any], service: dict[Any, Any], resources: Any) -> None:
    """Replicas on spot as SkyServe runs them: all above the on-demand base (``spot_share: 1``),
    when the task asks for spot or names a fallback, unless ``spot:`` says otherwise."""
    policy = service.get("replica_policy")
    fallback = isinstance(policy, dict) and (
        "base_ondemand_fallback_replicas" in policy or policy.get("dynamic_ondemand_fallback")
    )
    use_spot = isinstance(resources, dict) and resources.get("use_spot")
    spot_asked = use_spot is True or (isinstance(use_spot, str) and use_spot.lower() in _SPOT_WORDS)
    if "spot" in service or not (fallback or spot_asked):
        return
    spot = out.setdefault("spot", {})
    spot.setdefault("on_demand_base", 0)
    spot["spot_share"] = 1.0


# --- pool ----------------------------------------------------------------------------------------


def translate_pool(step: Pass, data: dict[Any, Any]) -> None:
    """Rewrite ``data["pool"]`` (if a mapping) in gpulease's field names; see the module."""
    if not isinstance(data.get("pool"), dict):
        return
    moves = {
        "workers": ("min_nodes", "max_nodes"),
        "min_workers": ("min_nodes",),
        "max_workers": ("max_nodes",),
        "downscale_delay_seconds": ("idle_timeout",),
    }
    out: dict[Any, Any] = {}
    for key, value in _pruned(data["pool"]).items():
        where = (*_POOL, key)
        if key in moves:
            step.skypilot_field(where)
            for name in moves[key]:
                step.put(out, _POOL, name, value, where)
        elif key in _IGNORED_POOL:
            step.skypilot_field(where)
            same = isinstance(value, int | float) and not isinstance(value, bool)
            if not (same and value == _POOL_SAME[key]):  # one waiting job, no delay: as here
                _ignore(step, where, _IGNORED_POOL[key])
        else:
            step.put(out, _POOL, key, value, where)
    data["pool"] = out


# --- JSON Schema: SkyPilot's forms of the two sections --------------------------------------------

_COMPAT = "SkyPilot compatibility: "
_NUMBER = {"type": "number", "minimum": 0}
_INT = {"type": "integer", "minimum": 0}


def _compat(form: dict[str, Any], what: str) -> dict[str, Any]:
    return {**form, "description": _COMPAT + what}


def _ignored(why: str) -> dict[str, Any]:
    return {"description": _COMPAT + f"read and ignored with a warning ({why})."}


_POLICY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": _COMPAT + "SkyServe's replica policy; becomes replicas, autoscale and spot. "
    "Other fields are ignored with a warning.",
    "properties": {
        "min_replicas": _compat(_INT, "replicas.min."),
        "max_replicas": _compat(_INT, "replicas.max."),
        "target_qps_per_replica": _compat(
            {"anyOf": [_NUMBER, {"type": "object", "additionalProperties": _NUMBER}]},
            "autoscale with metric qps and this target_per_replica (per accelerator: the lowest).",
        ),
        "upscale_delay_seconds": _compat(_NUMBER, "autoscale.up.for (seconds)."),
        "downscale_delay_seconds": _compat(_NUMBER, "autoscale.down.for (seconds)."),
        "base_ondemand_fallback_replicas": _compat(_INT, "spot.on_demand_base."),
        "dynamic_ondemand_fallback": _compat(
            {"type": "boolean"}, "gpulease always falls back to on-demand while spot is short."
        ),
        **{name: _ignored(why) for name, why in _IGNORED_POLICY.items()},
    },
}
_PROBE_FIELDS: dict[str, Any] = {
    "initial_delay_seconds": _compat(_NUMBER, "initial_delay in seconds."),
    "timeout_seconds": _compat(_NUMBER, "timeout in seconds."),
    **{name: _ignored(why) for name, why in _IGNORED_PROBE.items()},
}
_POOL_FIELDS: dict[str, Any] = {
    "workers": _compat(_INT, "SkyPilot 0.14's pool size: min_nodes = max_nodes = workers."),
    "min_workers": _compat(_INT, "min_nodes."),
    "max_workers": _compat(_INT, "max_nodes."),
    "downscale_delay_seconds": _compat(_NUMBER, "idle_timeout in seconds."),
    **{name: _ignored(why) for name, why in _IGNORED_POOL.items()},
}


def _widen(field: dict[str, Any], form: dict[str, Any]) -> None:
    """Let ``field`` (a property schema) also take ``form``."""
    description = field.pop("description", None)
    default = field.pop("default", None)
    forms = field.pop("anyOf", None) or [dict(field)]
    field.clear()
    field["anyOf"] = [form, *forms]
    if description:
        field["description"] = description
    if default is not None:
        field["default"] = default


def add_serve_schema(schema: dict[str, Any]) -> None:
    """SkyPilot's spellings in ``service``, ``readiness_probe``, ``replicas`` and ``pool``."""
    defs: dict[str, Any] = schema["$defs"]
    service = defs["ServiceSpec"]["properties"]
    service["replica_policy"] = _POLICY_SCHEMA
    service["ports"] = _compat({"type": "integer"}, "the replica port; same as port.")
    service["load_balancing_policy"] = _compat(
        {"type": "string"}, "least_load is what gpulease does; others are ignored with a warning."
    )
    for name, why in _IGNORED_SERVICE.items():
        service.setdefault(name, _ignored(why))
    _widen(service["readiness_probe"], {"type": "string", "description": "the path probed"})
    _widen(service["replicas"], {"type": "integer", "minimum": 0, "description": "min = max"})
    probe = defs["ReadinessProbe"]["properties"]
    probe.update(_PROBE_FIELDS)
    _widen(probe["post_data"], {"type": "string", "description": "the JSON body as text"})
    defs["PoolSpec"]["properties"].update(_POOL_FIELDS)
