"""The ``service:`` and ``pool:`` sections, ``resources.ports`` / ``resources.pool``, and
SkyPilot's SkyServe and pool fields: parsing, defaults, errors naming the field and line,
properties."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from gpulease.errors import SpecError
from gpulease.spec import (
    Task,
    dump_task,
    load_task_with_warnings,
    parse_task,
    parse_task_with_warnings,
)
from gpulease.spec.pool import PoolSpec
from gpulease.spec.serve_fields import format_ports, parse_seconds
from gpulease.spec.service import (
    AutoscaleSpec,
    ReadinessProbe,
    ScaleDown,
    ScaleRule,
    ScaleUp,
    ServiceSpec,
    ServiceSpot,
)

from .conftest import FIXTURES

SERVE = FIXTURES / "serve"
SKYPILOT = FIXTURES / "skypilot"
CORPUS = Path(__file__).parent / "skypilot_corpus" / "files"
_SERVICE = re.compile(r"^service:", re.MULTILINE)


def _parse(text: str) -> tuple[Task, list[str]]:
    return parse_task_with_warnings(textwrap.dedent(text), "t.yaml")


def _service(text: str) -> ServiceSpec:
    task, _ = _parse(text)
    assert task.service is not None
    return task.service


def _error(text: str) -> SpecError:
    with pytest.raises(SpecError) as caught:
        _parse(text)
    return caught.value


# --- gpulease's own format -------------------------------------------------------------------


def test_the_issue_example_reads_every_field() -> None:
    task, messages = load_task_with_warnings(FIXTURES / "native" / "serve_digits_t4.yaml")
    assert messages == []
    service = task.service
    assert service is not None
    assert service.port == 8080
    assert service.readiness_probe == ReadinessProbe(
        path="/health", initial_delay_s=20.0, timeout_s=5.0
    )
    assert (service.replicas.min, service.replicas.max) == (1, 8)
    assert service.autoscale == AutoscaleSpec(
        metric="load",
        target_per_replica=8.0,
        up=ScaleUp(threshold=0.8, step=2, for_s=60.0),
        down=ScaleDown(threshold=0.3, step=1, for_s=300.0),
        cooldown_s=60.0,
    )
    assert service.spot == ServiceSpot(on_demand_base=1, spot_share=0.75)
    assert task.resources.ports == [8080]
    assert task.pool is None


def test_defaults() -> None:
    service = _service("service: {}\n")
    assert service == ServiceSpec()
    assert service.port == 8080
    assert service.readiness_probe == ReadinessProbe(path="/", initial_delay_s=1200, timeout_s=15)
    assert (service.replicas.min, service.replicas.max) == (1, 1)
    assert service.autoscale is None  # fixed at replicas.min
    assert service.spot == ServiceSpot(on_demand_base=1, spot_share=0.0)
    rule = AutoscaleSpec()
    assert (rule.metric, rule.target_per_replica, rule.cooldown_s) == ("load", 8.0, 60.0)
    assert (rule.up.threshold, rule.up.step, rule.up.for_s) == (0.8, 2, 60.0)
    assert (rule.down.threshold, rule.down.step, rule.down.for_s) == (0.3, 1, 300.0)
    assert PoolSpec() == PoolSpec(min_nodes=0, max_nodes=4, idle_timeout_s=600.0)
    task, _ = _parse("run: echo\n")
    assert (task.service, task.pool, task.resources.ports, task.resources.pool) == (
        None,
        None,
        [],
        None,
    )


def test_short_forms() -> None:
    service = _service("service: {readiness_probe: /health, replicas: 3}\n")
    assert service.readiness_probe.path == "/health"
    assert (service.replicas.min, service.replicas.max) == (3, 3)
    assert service.autoscale is None


def test_a_range_without_autoscale_scales_by_the_default_rule() -> None:
    assert _service("service: {replicas: {min: 1, max: 8}}\n").autoscale == AutoscaleSpec()
    zero = _service("service: {replicas: {min: 0}}\n")
    assert (zero.replicas.min, zero.replicas.max) == (0, 1)  # scale to zero, up to one
    assert zero.autoscale == AutoscaleSpec()


def test_a_partial_rule_keeps_the_other_defaults() -> None:
    service = _service("service: {autoscale: {metric: QPS, up: {above: 0.9}, down: {for: 10m}}}\n")
    assert service.autoscale is not None
    assert service.autoscale.metric == "qps"
    assert service.autoscale.up == ScaleUp(threshold=0.9, step=2, for_s=60.0)
    assert service.autoscale.down == ScaleDown(threshold=0.3, step=1, for_s=600.0)


def test_rules_are_accepted_as_plain_scale_rules_in_python() -> None:
    spec = AutoscaleSpec(
        up=ScaleRule(threshold=0.7, step=3, for_s=30),
        down=ScaleRule(threshold=0.2, step=1, for_s=0),
    )
    assert isinstance(spec.up, ScaleUp) and spec.up.step == 3
    assert isinstance(spec.down, ScaleDown) and spec.down.for_s == 0


@pytest.mark.parametrize(
    ("text", "seconds"),
    [(20, 20.0), ("20s", 20.0), ("5m", 300.0), ("1.5m", 90.0), ("1h", 3600.0), ("2d", 172800.0),
     ("90 seconds", 90.0), ("0", 0.0), (0.25, 0.25)],
)  # fmt: skip
def test_durations_are_seconds(text: object, seconds: float) -> None:
    assert parse_seconds(text) == seconds
    service = _service(f"service: {{readiness_probe: {{initial_delay: {text}}}}}\n")
    assert service.readiness_probe.initial_delay_s == seconds


@pytest.mark.parametrize(
    ("value", "ports"),
    [("8080", [8080]), ("'8080'", [8080]), ("'8000-8002'", [8000, 8001, 8002]),
     ("[8080, '9000-9001', 8080]", [8080, 9000, 9001]), ("[]", [])],
)  # fmt: skip
def test_resource_ports(value: str, ports: list[int]) -> None:
    task, messages = _parse(f"resources:\n  ports: {value}\n")
    assert task.resources.ports == ports
    assert messages == []


def test_ports_are_written_back_as_ranges() -> None:
    assert format_ports([8000, 8001, 8002, 9000, 7000, 7001]) == ["8000-8002", 9000, "7000-7001"]
    task, _ = _parse("resources: {ports: '8000-8100'}\n")
    assert "8000-8100" in dump_task(task)
    assert parse_task(dump_task(task)) == task


def test_the_first_port_is_the_replica_port_unless_service_port_is_given() -> None:
    task, _ = _parse("resources: {ports: [8000, 8001]}\nservice: {}\n")
    assert task.service is not None and task.service.port == 8000
    task, _ = _parse("resources: {ports: [8000]}\nservice: {port: 8080}\n")
    assert task.service is not None and task.service.port == 8080
    assert parse_task(dump_task(task)) == task  # port 8080 is written, not left to the default


def test_pool_file_and_a_job_on_a_pool() -> None:
    task, messages = load_task_with_warnings(SERVE / "pool_native.yaml")
    assert messages == []
    assert task.pool == PoolSpec(min_nodes=1, max_nodes=6, idle_timeout_s=900.0)
    assert task.resources.use_spot is True
    assert _parse("pool: {min_nodes: 6}\n")[0].pool == PoolSpec(min_nodes=6, max_nodes=6)
    job, _ = _parse("resources: {pool: a100-pool}\nrun: python train.py\n")
    assert job.resources.pool == "a100-pool"


# --- errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "field", "line", "words"),
    [
        ("service:\n  port: 70000\n", "service.port", 2, "at most 65535"),
        ("service:\n  port: http\n", "service.port", 2, "whole number"),
        ("service:\n  readiness_probe: health\n", "service.readiness_probe", 2, "'/'"),
        ("service:\n  readiness_probe:\n    timeout: 0\n", "service.readiness_probe.timeout", 3,
         "greater than 0"),
        ("service:\n  readiness_probe: {initial_delay: 5 parsecs}\n",
         "service.readiness_probe.initial_delay", 2, "unknown unit"),
        ("service:\n  readiness_probe: {post_data: '{oops'}\n",
         "service.readiness_probe.post_data", 2, "JSON"),
        ("service:\n  replicas:\n    min: 3\n    max: 2\n", "service.replicas.max", 4,
         "at least min (3)"),
        ("service:\n  replicas: {min: 1001}\n", "service.replicas.min", 2, "at most 1000"),
        ("service:\n  replicas: 1.5\n", "service.replicas", 2, "whole number"),
        ("service:\n  autoscale: {metric: cpu}\n", "service.autoscale.metric", 2, "qps"),
        ("service:\n  autoscale:\n    down: {below: 0.9}\n", "service.autoscale.down", 3,
         "lower than up.above"),
        ("service:\n  autoscale:\n    up: {add: 0}\n", "service.autoscale.up.add", 3,
         "at least 1"),
        ("service:\n  autoscale:\n    up: {below: 0.2}\n", "service.autoscale.up.below", 3,
         "unknown field"),
        ("service:\n  autoscale: {target_per_replica: -2}\n",
         "service.autoscale.target_per_replica", 2, "greater than 0"),
        ("service:\n  spot: {spot_share: 1.5}\n", "service.spot.spot_share", 2, "at most 1"),
        ("service:\n  replica: 2\n", "service.replica", 2, "did you mean 'replicas'"),
        ("service: 5\n", "service", 1, "mapping"),
        ("pool:\n  min_nodes: 5\n  max_nodes: 2\n", "pool.max_nodes", 3, "at least min_nodes"),
        ("pool:\n  max_nodes: 0\n", "pool.max_nodes", 2, "at least 1"),
        ("service: {}\npool: {}\n", "pool", 2, "not both"),
        ("resources:\n  ports: 0\n", "resources.ports", 2, "1..65535"),
        ("resources:\n  ports: '9000-8000'\n", "resources.ports", 2, "ends before it starts"),
        ("resources:\n  ports: [8080, x]\n", "resources.ports", 2, "item 2"),
        ("resources:\n  pool: ''\n", "resources.pool", 2, "at least 1 character"),
    ],
)  # fmt: skip
def test_errors_name_the_field_and_line(text: str, field: str, line: int, words: str) -> None:
    error = _error(text)
    assert (error.field, error.line) == (field, line), str(error)
    assert words in error.message, str(error)


@pytest.mark.parametrize(
    ("text", "field", "line", "words"),
    [
        ("service:\n  replica_policy:\n    min_replicas: 3\n    max_replicas: 1\n",
         "service.replica_policy.max_replicas", 4, "at least min (3)"),
        ("service:\n  replica_policy:\n    target_qps_per_replica: -1\n",
         "service.replica_policy.target_qps_per_replica", 3, "greater than 0"),
        ("service:\n  replica_policy:\n    upscale_delay_seconds: soon\n",
         "service.replica_policy.upscale_delay_seconds", 3, "duration"),
        ("service:\n  replica_policy:\n    base_ondemand_fallback_replicas: -1\n",
         "service.replica_policy.base_ondemand_fallback_replicas", 3, "at least 0"),
        ("service:\n  readiness_probe:\n    path: /\n    timeout_seconds: x\n",
         "service.readiness_probe.timeout_seconds", 4, "duration"),
        ("service:\n  ports: 0\n", "service.ports", 2, "at least 1"),
        ("service:\n  replica_policy: 3\n", "service.replica_policy", 2, "mapping"),
        ("service:\n  replicas: 2\n  replica_policy: {min_replicas: 1}\n",
         "service.replica_policy", 3, "conflicts with service.replicas"),
        ("service:\n  port: 80\n  ports: 8080\n", "service.ports", 3, "conflicts"),
        ("service:\n  spot: {}\n  replica_policy:\n    base_ondemand_fallback_replicas: 1\n",
         "service.replica_policy.base_ondemand_fallback_replicas", 4, "service.spot"),
        ("pool:\n  workers: 0\n", "pool.workers", 2, "at least 1"),
        ("pool:\n  workers: 2\n  min_workers: 1\n", "pool.min_workers", 3, "conflicts"),
    ],
)  # fmt: skip
def test_errors_in_skypilot_fields_name_what_the_user_wrote(
    text: str, field: str, line: int, words: str
) -> None:
    error = _error(text)
    assert (error.field, error.line) == (field, line), str(error)
    assert words in error.message, str(error)


# --- SkyPilot's fields ------------------------------------------------------------------------


def test_skyserve_autoscaling_policy() -> None:
    task, messages = load_task_with_warnings(SKYPILOT / "skyserve_autoscale.yaml")
    service = task.service
    assert service is not None
    assert service.port == 8000  # the first of resources.ports
    assert task.resources.ports == [8000, 8001, 8002]
    probe = service.readiness_probe
    assert (probe.path, probe.initial_delay_s, probe.timeout_s) == (
        "/v1/chat/completions",
        1800.0,
        30.0,
    )
    assert probe.post_data is not None and probe.post_data["max_tokens"] == 1
    assert (service.replicas.min, service.replicas.max) == (1, 6)
    assert service.autoscale is not None
    assert (service.autoscale.metric, service.autoscale.target_per_replica) == ("qps", 2.5)
    assert service.autoscale.up.for_s == 120.0
    assert service.autoscale.down.for_s == 900.0
    assert service.spot == ServiceSpot(on_demand_base=1, spot_share=1.0)
    joined = "\n".join(messages)
    assert "service.replica_policy" in messages[0]  # read as SkyPilot
    for field in ("readiness_probe.headers", "replica_policy.num_overprovision",
                  "load_balancing_policy"):  # fmt: skip
        assert f"service.{field}: ignored" in joined, field
    assert "dynamic_ondemand_fallback" not in "\n".join(messages[1:])


def test_skyserve_fixed_replicas() -> None:
    task, messages = load_task_with_warnings(SKYPILOT / "skyserve_fixed.yaml")
    service = task.service
    assert service is not None
    assert service.port == 9000  # service.ports wins over the first of resources.ports
    assert task.resources.ports == [9100, 9000]
    assert service.readiness_probe.path == "/health"
    assert (service.replicas.min, service.replicas.max, service.autoscale) == (2, 2, None)
    assert service.spot == ServiceSpot()  # on-demand: the task does not ask for spot
    assert len(messages) == 1  # least_load is what gpulease does: no warning


def test_use_spot_alone_puts_every_replica_on_spot() -> None:
    service = _service("resources: {use_spot: true}\nservice: {replicas: 2}\n")
    assert service.spot == ServiceSpot(on_demand_base=0, spot_share=1.0)
    kept = _service("resources: {use_spot: true}\nservice: {spot: {spot_share: 0.5}}\n")
    assert kept.spot == ServiceSpot(on_demand_base=1, spot_share=0.5)
    task, _ = _parse("resources: {use_spot: true}\nservice: {spot: {}}\n")
    assert task.service is not None and task.service.spot == ServiceSpot()
    assert parse_task(dump_task(task)) == task  # the default mix is written back as spot: {}


def test_per_accelerator_qps_targets_use_the_lowest() -> None:
    task, messages = _parse(
        "service:\n  replica_policy:\n    min_replicas: 1\n    max_replicas: 4\n"
        "    target_qps_per_replica: {'H100:1': 5, A100: 2}\n"
    )
    assert task.service is not None and task.service.autoscale is not None
    assert task.service.autoscale.target_per_replica == 2
    assert any("target_qps_per_replica: one target" in message for message in messages)


def test_policies_skyserve_would_refuse_are_read_with_a_note() -> None:
    task, messages = _parse("service:\n  replica_policy: {min_replicas: 0, max_replicas: 2}\n")
    assert task.service is not None and task.service.autoscale == AutoscaleSpec()
    assert any("scale by load" in message for message in messages)
    task, messages = _parse("service:\n  replica_policy: {target_qps_per_replica: 3}\n")
    assert task.service is not None and task.service.replicas.max == 1
    assert any("no max_replicas" in message for message in messages)


@pytest.mark.parametrize(
    ("field", "value"),
    [("tls", "{keyfile: k, certfile: c}"), ("load_balancer", "{stream_timeout_seconds: 9}"),
     ("workers", "2"), ("pool", "true")],
)  # fmt: skip
def test_service_fields_without_a_meaning_here_are_named_in_a_warning(
    field: str, value: str
) -> None:
    task, messages = _parse(f"service:\n  {field}: {value}\n")
    assert task.service == ServiceSpec()
    assert any(f"t.yaml:2: service.{field}: ignored" in message for message in messages)


def test_skypilot_pools() -> None:
    task, messages = load_task_with_warnings(SKYPILOT / "skypilot_pool.yaml")
    assert task.pool == PoolSpec(min_nodes=3, max_nodes=3)
    assert "pool.workers" in messages[0]
    task, messages = load_task_with_warnings(SERVE / "skypilot_pool_autoscale.yaml")
    assert task.pool == PoolSpec(min_nodes=0, max_nodes=5, idle_timeout_s=600.0)
    joined = "\n".join(messages)
    assert "pool.queue_length_threshold: ignored" in joined
    assert "pool.upscale_delay_seconds: ignored" in joined
    _, messages = _parse("pool: {max_workers: 3, queue_length_threshold: 1}\n")
    assert len(messages) == 1  # read as SkyPilot; a threshold of one job is what gpulease does


def test_every_service_in_the_skypilot_corpus_is_read_as_a_service() -> None:
    files = [path for path in sorted(CORPUS.glob("*.yaml")) if _SERVICE.search(path.read_text())]
    assert len(files) >= 15
    for path in files:
        task, messages = load_task_with_warnings(path)
        assert task.service is not None, path.name
        assert not any(": service: ignored" in message for message in messages), path.name
        assert parse_task(dump_task(task)) == task, path.name
