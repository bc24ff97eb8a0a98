"""Live AWS prices (`gpulease catalog update --provider aws`): newest spot quote per zone, instance
facts, Spot Advisor bands (served locally or unreachable), error classification, and the merge
against a real moto server (tests/awsfixtures.py)."""

from __future__ import annotations

import http.server
import json
import threading
import urllib.request
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpulease.catalog import Catalog, cache_info
from gpulease.catalog._aws_live import (
    RegionData,
    SpotQuote,
    classify,
    default_regions,
    instance_info,
    newest_quotes,
    update_from_aws,
)
from gpulease.catalog._aws_merge import merge
from gpulease.catalog._spot_advisor import URL_ENV, parse
from gpulease.errors import CatalogError, Retryable, UserInputError
from tests.awsfixtures import aws_env, moto_server  # noqa: F401  (fixtures)
from tests.cli.conftest import Cli

FIXTURES = Path(__file__).parent / "fixtures"
ADVISOR = FIXTURES / "spot_advisor.json"
TODAY = date(2027, 1, 15)
T0 = datetime(2027, 1, 15, 12, 0, tzinfo=UTC)
UNREACHABLE = "http://127.0.0.1:9/spot-advisor-data.json"


# -- pure parts -----------------------------------------------------------------------------------


def test_newest_quote_wins_per_type_and_zone() -> None:
    quotes = [
        SpotQuote("p4d.24xlarge", "us-east-1a", 9.0, T0 - timedelta(hours=2)),
        SpotQuote("p4d.24xlarge", "us-east-1a", 7.5, T0),
        SpotQuote("p4d.24xlarge", "us-east-1a", 8.0, T0 - timedelta(hours=1)),
        SpotQuote("p4d.24xlarge", "us-east-1b", 6.0, T0 - timedelta(days=1)),
        SpotQuote("g5.xlarge", "us-east-1a", 0.4, T0),
    ]
    best = newest_quotes(quotes)
    assert {k: q.price for k, q in best.items()} == {
        ("p4d.24xlarge", "us-east-1a"): 7.5,
        ("p4d.24xlarge", "us-east-1b"): 6.0,
        ("g5.xlarge", "us-east-1a"): 0.4,
    }


def test_instance_info_from_describe_instance_types() -> None:
    item = {
        "InstanceType": "p4d.24xlarge",
        "VCpuInfo": {"DefaultVCpus": 96},
        "MemoryInfo": {"SizeInMiB": 1179648},
        "GpuInfo": {"Gpus": [{"Name": "A100", "Manufacturer": "NVIDIA", "Count": 8,
                              "MemoryInfo": {"SizeInMiB": 40960}}]},
    }  # fmt: skip
    info = instance_info(item)
    assert info is not None
    assert (info.gpu_count, info.gpu_memory_gb, info.vcpus, info.ram_gb) == (8, 40.0, 96.0, 1152.0)
    assert instance_info({"InstanceType": "m5.large", "VCpuInfo": {"DefaultVCpus": 2}}) is None


def test_merge_keeps_other_regions_and_providers_and_drops_spot_above_on_demand() -> None:
    current = Catalog.load(bundled_only=True).offers
    on_demand = float(
        current.price_on_demand[
            (current.provider == "aws")
            & (current.region == "us-east-1")
            & (current.instance_type == "p4d.24xlarge")
        ][0]
    )
    data = RegionData("us-east-1", zone_ids={"us-east-1a": "use1-az6"})
    data.quotes = [
        SpotQuote("p4d.24xlarge", "us-east-1a", 5.0, T0 - timedelta(hours=1)),
        SpotQuote("p4d.24xlarge", "us-east-1a", 6.0, T0),
        SpotQuote("p4d.24xlarge", "us-east-1b", on_demand + 1, T0),
    ]
    merged = merge(current, {"us-east-1": data}, {("us-east-1", "p4d.24xlarge"): 1}, as_of="x")
    table = merged.table
    outside = ~((table.provider == "aws") & (table.region == "us-east-1"))
    before = ~((current.provider == "aws") & (current.region == "us-east-1"))
    assert int(outside.sum()) == int(before.sum())
    rows = [
        o for o in table.rows() if o.instance_type == "p4d.24xlarge" and o.region == "us-east-1"
    ]
    by_zone = {o.zone: o for o in rows}
    assert set(by_zone) == {"use1-az6", "us-east-1b"}
    assert by_zone["use1-az6"].price_spot == 6.0
    assert by_zone["us-east-1b"].price_spot is None  # at or above on-demand: no spot quote
    assert all(o.source == "aws-api" and o.interruption_band == 1 for o in rows)
    assert all(o.price_on_demand == on_demand for o in rows)


def test_default_regions_are_capped() -> None:
    offers = Catalog.load(bundled_only=True).offers
    regions, total = default_regions(offers, cap=3)
    assert regions[0] == "us-east-1" and len(regions) == 3 < total


def _client_error(code: str) -> Exception:
    from botocore.exceptions import ClientError

    return ClientError({"Error": {"Code": code, "Message": "nope"}}, "DescribeSpotPriceHistory")


@pytest.mark.parametrize("code", ["AuthFailure", "UnauthorizedOperation", "AccessDenied"])
def test_denied_is_user_input(code: str) -> None:
    err = classify(_client_error(code), "us-east-1")
    assert isinstance(err, UserInputError) and code in str(err) and "permission" in str(err)


def test_error_classification() -> None:
    from botocore.exceptions import EndpointConnectionError, NoCredentialsError

    assert isinstance(classify(_client_error("RequestLimitExceeded"), "r"), Retryable)
    assert isinstance(classify(NoCredentialsError(), "r"), UserInputError)
    unreachable = classify(EndpointConnectionError(endpoint_url="http://x"), "r")
    assert isinstance(unreachable, CatalogError) and "cannot reach" in str(unreachable)
    assert isinstance(classify(_client_error("InternalError"), "r"), CatalogError)


def test_throttling_is_retried_with_backoff_and_bounded() -> None:
    from gpulease.catalog._aws_live import RETRY_ATTEMPTS, _call
    from gpulease.clock import VirtualClock

    clock = VirtualClock()
    calls: list[int] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise _client_error("RequestLimitExceeded")
        return "ok"

    assert _call(flaky, "us-east-1", clock) == "ok" and len(calls) == 3

    def always() -> str:
        calls.append(1)
        raise _client_error("Throttling")

    calls.clear()
    with pytest.raises(Retryable, match="throttled"):
        _call(always, "us-east-1", clock)
    assert len(calls) == RETRY_ATTEMPTS


# -- Spot Advisor ---------------------------------------------------------------------------------


def test_spot_advisor_fixture_parses_linux_bands_and_skips_malformed() -> None:
    bands = parse(json.loads(ADVISOR.read_text()))
    assert bands == {
        ("us-east-1", "p4d.24xlarge"): 1,
        ("us-east-1", "g5.xlarge"): 3,
        ("eu-west-1", "p4d.24xlarge"): 2,
    }


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 8) | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)
_entry = st.fixed_dictionaries({}, optional={"r": _json, "s": _json}) | _json
_document = (
    st.fixed_dictionaries(
        {},
        optional={
            "ranges": st.lists(
                st.fixed_dictionaries(
                    {},
                    optional={
                        "index": _json,
                        "label": st.sampled_from(["<5%", "5-10%", ">20%", "?"]) | _json,
                    },
                )
                | _json,
                max_size=6,
            ),
            "spot_advisor": st.dictionaries(
                st.text(max_size=8),
                st.dictionaries(
                    st.sampled_from(["Linux", "Windows"]) | st.text(max_size=3),
                    st.dictionaries(st.text(max_size=8), _entry, max_size=4) | _json,
                ),
                max_size=3,
            )
            | _json,
        },
    )
    | _json
)


@settings(max_examples=200, deadline=None)
@given(_document)
def test_spot_advisor_parser_never_crashes(document: object) -> None:
    bands = parse(document)
    assert all(0 <= band <= 4 for band in bands.values())


@pytest.fixture
def advisor_server() -> Iterator[str]:
    body = ADVISOR.read_bytes()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/spot-advisor-data.json"
    finally:
        server.shutdown()
        server.server_close()


# -- against moto ---------------------------------------------------------------------------------


@pytest.fixture
def moto(aws_env: str) -> str:  # noqa: F811
    request = urllib.request.Request(f"{aws_env}/moto-api/reset", method="POST")
    urllib.request.urlopen(request, timeout=10).close()
    return aws_env


def _aws_rows(catalog: Catalog, region: str) -> np.ndarray:
    o = catalog.offers
    return np.flatnonzero((o.provider == "aws") & (o.region == region))


def test_update_against_moto_merges_spot_prices_and_facts(
    moto: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(URL_ENV, UNREACHABLE)
    bundled = Catalog.load(bundled_only=True)
    result = update_from_aws(["us-east-1"], today=TODAY)
    assert result.regions == ["us-east-1"] and result.rows > 0
    assert len(result.warnings) == 1 and "Spot Advisor" in result.warnings[0]
    catalog = Catalog.load()
    assert catalog.source == str(result.path)
    o = catalog.offers
    fresh = [o.row(int(i)) for i in _aws_rows(catalog, "us-east-1")]
    p4d = [r for r in fresh if r.instance_type == "p4d.24xlarge"]
    assert p4d and all(r.source == "aws-api" and r.as_of == TODAY.isoformat() for r in p4d)
    assert all((r.gpu_count, r.gpu_memory_gb, r.accelerator) == (8, 40.0, "A100") for r in p4d)
    assert all(r.vcpus == 96 and r.ram_gb == 1152 and r.price_spot for r in p4d)
    assert len({r.zone for r in p4d}) > 1 and all(r.zone.startswith("use1-az") for r in p4d)
    # bands kept from the snapshot when the advisor is unreachable
    old_bands = {int(bundled.offers.interruption_band[i]) for i in _aws_rows(bundled, "us-east-1")
                 if bundled.offers.instance_type[i] == "p4d.24xlarge"}  # fmt: skip
    assert {r.interruption_band for r in p4d} <= {b if b >= 0 else None for b in old_bands}
    # other providers and other AWS regions untouched
    for name in ("gcp", "lambda"):
        assert int((o.provider == name).sum()) == int((bundled.offers.provider == name).sum())
    assert len(_aws_rows(catalog, "us-west-2")) == len(_aws_rows(bundled, "us-west-2"))
    assert "aws" in cache_info()["providers_refreshed"]  # type: ignore[index]
    # the host CPU from ProcessorInfo: Graviton g5g is arm64, p4d x86_64; the schema is recorded
    archs = {(r.instance_type, r.cpu_arch) for r in fresh if r.source == "aws-api"}
    assert ("p4d.24xlarge", "x86_64") in archs and ("g5g.xlarge", "arm64") in archs, archs
    assert cache_info()["offers_schema"] == 2  # type: ignore[index]


def test_update_with_spot_advisor_served_locally_updates_bands(
    moto: str, advisor_server: str
) -> None:
    result = update_from_aws(["us-east-1"], today=TODAY, advisor_url=advisor_server)
    assert result.warnings == []
    catalog = Catalog.load()
    rows = [catalog.offers.row(int(i)) for i in _aws_rows(catalog, "us-east-1")]
    assert {r.interruption_band for r in rows if r.instance_type == "p4d.24xlarge"} == {1}
    assert {r.interruption_band for r in rows if r.instance_type == "g5.xlarge"} == {3}


def test_a_failing_update_writes_nothing(moto: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    with pytest.raises(CatalogError, match="cannot reach"):
        update_from_aws(["us-east-1"], today=TODAY)
    assert cache_info() is None


def test_cli_update_provider_aws(
    moto: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(URL_ENV, UNREACHABLE)
    cli = Cli(tmp_path / "cli-home")
    out = cli("catalog", "update", "--provider", "aws", "--region", "us-east-1")
    assert out.returncode == 0, out.stderr
    assert "aws-api" in out.stdout and out.stderr.count("warning:") == 1
    show = json.loads(cli("catalog", "show", "--json", check=True).stdout)
    assert show["sources"]["aws-api"] > 0 and show["providers"]["gcp"] > 0
    bad = cli("catalog", "update", "--region", "us-east-1")
    assert bad.returncode == 2 and "--region" in bad.stderr
