"""Spot interruptions come back from ``poll_events`` as events. moto has no interruption API,
so this test runs moto in process (``ThreadedMotoServer``) and terminates the instance through
moto's backend with the reason EC2 gives a spot interruption."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpulease.providers.aws import AwsProvider, AwsSettings
from gpulease.providers.aws.events import EventTracker
from gpulease.providers.base import EventKind, LaunchRequest
from tests.awsfixtures import fresh_default_session

ACCOUNT = "123456789012"


@pytest.fixture(scope="module")
def threaded_moto() -> Iterator[str]:
    server_mod = pytest.importorskip("moto.server")
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def provider(
    threaded_moto: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[AwsProvider]:
    monkeypatch.setenv("AWS_ENDPOINT_URL", threaded_moto)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    fresh_default_session(monkeypatch)
    made = AwsProvider(tmp_path / "aws", AwsSettings(tunnels=False), retry_base=0.01)
    yield made
    made.close()


def _interrupt(instance_id: str) -> None:
    """What EC2 does to a spot instance it takes back."""
    from moto.backends import get_backend
    from moto.ec2.models.instances import StateReason

    backend = get_backend("ec2")[ACCOUNT]["us-east-1"]
    backend.terminate_instances([instance_id])
    code = "Server.SpotInstanceTermination"
    backend.get_instance(instance_id).state_reason = StateReason(f"{code}: interrupted", code)


def test_a_spot_interruption_is_reported_once_as_preempted(provider: AwsProvider) -> None:
    request = LaunchRequest("req-spot", "c1", "gl-spot", spot=True, zone="us-east-1c")
    (inst,) = provider.launch(request)
    (other,) = provider.launch(LaunchRequest("req-od", "c1", "gl-spot"))
    provider.poll_events()
    _interrupt(inst.id)
    provider.terminate([other.id])  # a user's terminate is a state change, not a preemption
    events = provider.poll_events()
    kinds = {(e.instance_id, e.kind) for e in events}
    assert (inst.id, EventKind.PREEMPTED) in kinds
    assert (other.id, EventKind.PREEMPTED) not in kinds
    assert (other.id, EventKind.STATE_CHANGE) in kinds
    (preempted,) = [e for e in events if e.kind is EventKind.PREEMPTED]
    assert (preempted.region, preempted.zone) == ("us-east-1", "us-east-1c")
    assert [e for e in provider.poll_events() if e.instance_id == inst.id] == []


def test_a_spot_request_marked_for_termination_is_one_notice() -> None:
    tracker = EventTracker()
    tracker.seen("i-1", "running")
    marked = {"InstanceId": "i-1", "Status": {"Code": "marked-for-termination"}}
    unrelated = {"InstanceId": "i-2", "Status": {"Code": "marked-for-termination"}}
    fine = {"InstanceId": "i-1", "Status": {"Code": "fulfilled"}}
    assert tracker.notices([("r", fine)], 1.0) == []
    (event,) = tracker.notices([("r", marked), ("r", unrelated)], 2.0)
    assert (event.kind, event.instance_id, event.detail) == (
        EventKind.PREEMPTION_NOTICE, "i-1", "marked-for-termination",
    )  # fmt: skip
    assert tracker.notices([("r", marked)], 3.0) == []
