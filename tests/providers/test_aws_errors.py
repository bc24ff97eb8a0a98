"""EC2 error codes → typed provider errors (by code, never by message), and the retry loop."""

from __future__ import annotations

import pytest

pytest.importorskip("botocore", reason="the aws provider needs boto3 (gpulease[aws])")
from botocore.exceptions import ClientError, EndpointConnectionError

from gpulease.errors import GpuleaseError
from gpulease.providers.aws.errors import call, classify
from gpulease.providers.base import CapacityError, ProviderError, ProviderUnavailable, QuotaError

TABLE: list[tuple[str, type[GpuleaseError]]] = [
    ("InsufficientInstanceCapacity", CapacityError),
    ("InsufficientHostCapacity", CapacityError),
    ("Unsupported", CapacityError),
    ("SpotMaxPriceTooLow", CapacityError),
    ("MaxSpotInstanceCountExceeded", CapacityError),
    ("VcpuLimitExceeded", QuotaError),
    ("InstanceLimitExceeded", QuotaError),
    ("PendingVerification", QuotaError),
    ("RequestLimitExceeded", ProviderUnavailable),
    ("Throttling", ProviderUnavailable),
    ("ServiceUnavailable", ProviderUnavailable),
    ("InternalError", ProviderUnavailable),
    ("AuthFailure", ProviderError),
    ("UnauthorizedOperation", ProviderError),
    ("InvalidParameterValue", ProviderError),
    ("InvalidAMIID.NotFound", ProviderError),
    ("InvalidAMIID.Malformed", ProviderError),
]


def _error(code: str, message: str = "whatever the text says") -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message}}, "RunInstances")


@pytest.mark.parametrize(("code", "kind"), TABLE)
def test_every_code_maps_to_its_type(code: str, kind: type[GpuleaseError]) -> None:
    error = classify(_error(code), action="run_instances", region="r1", zone="r1a")
    assert type(error) is kind
    if isinstance(error, CapacityError):
        assert (error.region, error.zone) == ("r1", "r1a")


def test_the_message_text_does_not_decide() -> None:
    assert type(classify(_error("AuthFailure", "InsufficientInstanceCapacity"), action="x")) is (
        ProviderError
    )


def test_a_connection_failure_is_unavailable() -> None:
    exc = EndpointConnectionError(endpoint_url="http://nowhere")
    assert isinstance(classify(exc, action="x"), ProviderUnavailable)


def test_call_retries_only_unavailable_and_a_bounded_number_of_times() -> None:
    sleeps: list[float] = []
    codes = iter(["Throttling", "RequestLimitExceeded"])

    def flaky() -> str:
        code = next(codes, None)
        if code:
            raise _error(code)
        return "ok"

    assert call(flaky, action="x", base=0.1, cap=0.2, sleep=sleeps.append) == "ok"
    assert len(sleeps) == 2 and all(0 <= s <= 0.2 for s in sleeps)
    tries: list[int] = []

    def capacity() -> None:
        tries.append(1)
        raise _error("InsufficientInstanceCapacity")

    with pytest.raises(CapacityError):
        call(capacity, action="x", sleep=sleeps.append)
    assert tries == [1]

    def always() -> None:
        tries.append(1)
        raise _error("Throttling")

    with pytest.raises(ProviderUnavailable):
        call(always, action="x", attempts=3, sleep=sleeps.append)
    assert len(tries) == 4
