"""The local provider's fake GPU load (``providers.local.gpu_load`` / ``gpu_memory``): the
syntax and its messages, and real agents reporting the scripted GPUs on ``GET /v1/metrics``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpulease.agent.client import AgentClient
from gpulease.errors import UserInputError
from gpulease.providers._local_gpus import parse_gpu_load
from gpulease.providers.local import LocalProvider
from tests.providers.conformance import Harness
from tests.waiting import wait_until


def _script(section: dict[str, Any], gpus: list[int], gpu_count: int | None = 4) -> Any:
    return json.loads(parse_gpu_load(section, gpu_count).script(gpus, "T4"))


def test_a_constant_loads_every_gpu_and_memory_follows_it() -> None:
    script = _script({"gpu_load": 60}, [0, 3])
    assert script["name"] == "T4"
    assert script["memory_total_mb"] == 16000.0 and script["power_limit_w"] == 70.0
    assert script["gpus"] == [
        {"index": 0, "utilization_pct": [60.0], "memory_pct": [60.0]},
        {"index": 3, "utilization_pct": [60.0], "memory_pct": [60.0]},
    ]


def test_per_gpu_entries_patterns_and_idle_past_the_list() -> None:
    script = _script({"gpu_load": [90, [0, 100]], "gpu_memory": 25}, [0, 1, 2])
    assert [g["utilization_pct"] for g in script["gpus"]] == [[90.0], [0.0, 100.0], [0.0]]
    assert [g["memory_pct"] for g in script["gpus"]] == [[25.0]] * 3


def test_no_load_means_idle_gpus() -> None:
    assert _script({}, [1])["gpus"] == [{"index": 1, "utilization_pct": [0.0],
                                         "memory_pct": [0.0]}]  # fmt: skip


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"gpu_load": 101}, r"providers\.local\.gpu_load: a percentage from 0 to 100, not 101"),
        ({"gpu_load": "busy"}, r"providers\.local\.gpu_load: a percentage .* not 'busy'"),
        ({"gpu_load": True}, r"providers\.local\.gpu_load: a percentage"),
        ({"gpu_load": []}, r"providers\.local\.gpu_load: a list needs one entry per GPU"),
        ({"gpu_load": [1, 2, 3, 4, 5]}, r"gpu_load: 5 entries for 4 GPUs"),
        ({"gpu_load": [10, [0, -1]]}, r"providers\.local\.gpu_load\[1\]\[1\]: a percentage"),
        ({"gpu_load": [10, []]}, r"providers\.local\.gpu_load\[1\]: a pattern needs"),
        ({"gpu_load": [[[1]]]}, r"providers\.local\.gpu_load\[0\]\[0\]: a percentage"),
        ({"gpu_memory": [50, "x"]}, r"providers\.local\.gpu_memory\[1\]: a percentage"),
    ],
)
def test_bad_loads_name_the_field(section: dict[str, Any], message: str) -> None:
    with pytest.raises(UserInputError, match=message):
        LocalProvider.from_config({"providers": {"local": {"gpus": 4, **section}}})


def _client(provider: LocalProvider, instance_id: str) -> AgentClient:
    """A client for the node once its agent answers (launch may return it still PENDING)."""
    url: str = wait_until(
        lambda: next(i.agent_url for i in provider.list_instances({}) if i.id == instance_id),
        what=f"{instance_id} to answer",
    )
    return AgentClient(url, provider.node_token(instance_id))


@pytest.fixture
def loaded(tmp_path: Path) -> Iterator[Harness]:
    config = {"root": str(tmp_path / "local"), "gpus": 4, "accelerator": "T4",
              "gpu_load": [80, 20, 55, [0, 100]], "gpu_memory": [50, 10, 30, 40]}  # fmt: skip
    provider = LocalProvider.from_config({"providers": {"local": config}}, kill_grace_s=0.3)
    harness = Harness(provider)
    yield harness
    harness.cleanup()


def test_nodes_report_their_scripted_fake_gpus(loaded: Harness) -> None:
    provider = loaded.provider
    assert isinstance(provider, LocalProvider)
    instances = loaded.launch(loaded.request(num_nodes=2, gpus_per_node=2))
    reported = []
    for instance in sorted(instances, key=lambda i: i.node_rank):
        client = _client(provider, instance.id)
        samples = wait_until(lambda c=client: c.metrics()["samples"], what="a sample")
        assert client.metrics()["gpu_source"] == "fake"
        reported.append(samples[0])
        client.close()
    first, second = ([(g["index"], g["utilization_pct"], g["memory_used_mb"]) for g in s["gpus"]]
                     for s in reported)  # fmt: skip
    assert first == [(0, 80.0, 8000.0), (1, 20.0, 1600.0)]
    assert second == [(2, 55.0, 4800.0), (3, 0.0, 6400.0)]  # pass 0 of the pattern [0, 100]
    assert all(g["name"] == "T4 (fake)" for s in reported for g in s["gpus"])
    assert all(s["node"]["memory_total_mb"] > 0 for s in reported)


def test_cpu_nodes_report_no_gpus(loaded: Harness) -> None:
    provider = loaded.provider
    assert isinstance(provider, LocalProvider)
    (instance,) = loaded.launch(loaded.request(num_nodes=1, gpus_per_node=0))
    client = _client(provider, instance.id)
    samples = wait_until(lambda: client.metrics()["samples"], what="a sample")
    assert samples[0]["gpus"] == [] and samples[0]["node"]["cpu_count"] >= 1
    client.close()


def test_a_price_per_fake_gpu_hour_prices_the_gpu_shapes_and_their_instances(
    tmp_path: Path,
) -> None:
    from gpulease.catalog import Catalog

    config = {"root": str(tmp_path / "local"), "gpus": 4, "price_per_gpu_hour": 0.25}
    provider = LocalProvider.from_config({"providers": {"local": config}}, kill_grace_s=0.3)
    table = provider.offers(Catalog.load()).table
    prices = {
        str(k): float(v) for k, v in zip(table.instance_type, table.price_on_demand, strict=True)
    }
    assert prices == {"local-cpu": 0.0, "local-T4x1": 0.25, "local-T4x2": 0.5, "local-T4x4": 1.0}
    harness = Harness(provider)
    try:
        (instance,) = harness.launch(harness.request(num_nodes=1, gpus_per_node=2))
        assert instance.price_per_hour == 0.5
        listed = [i for i in provider.list_instances({}) if i.id == instance.id]
        assert [i.price_per_hour for i in listed] == [0.5]
    finally:
        harness.cleanup()


@pytest.mark.parametrize("value", [-1, "cheap", True, float("nan")])
def test_a_bad_price_per_gpu_hour_names_the_field(value: object) -> None:
    with pytest.raises(UserInputError, match=r"providers\.local\.price_per_gpu_hour: dollars"):
        LocalProvider.from_config(
            {"providers": {"local": {"gpus": 1, "price_per_gpu_hour": value}}}
        )
