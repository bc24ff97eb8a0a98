"""Reserved prices from the AWS Pricing API (`catalog/_aws_reserved.py`): the parser on recorded
GetProducts responses in the API's real shape (moto has no Pricing API), the merge into the
reserved columns, and `update_from_aws` with a real boto3 Pricing client talking to a local
server that answers GetProducts from those recordings (EC2 on the real moto server)."""

from __future__ import annotations

import http.server
import json
import threading
import urllib.request
from collections.abc import Iterator
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpulease.catalog import Catalog, cache_info
from gpulease.catalog._aws_live import update_from_aws
from gpulease.catalog._aws_reserved import apply, effective_rate, reserved_rates
from gpulease.catalog._spot_advisor import URL_ENV
from tests.awsfixtures import aws_env, moto_server  # noqa: F401  (fixtures)

RECORDED = Path(__file__).parent / "fixtures" / "aws_pricing_get_products.json"
UNREACHABLE = "http://127.0.0.1:9/spot-advisor-data.json"


def _price_list() -> list[str]:
    return list(json.loads(RECORDED.read_text())["PriceList"])


def test_lowest_effective_standard_rate_per_region_type_and_term() -> None:
    rates = reserved_rates(_price_list())
    # 1yr: No Upfront 13.6, All Upfront 113880/8760 = 13.0, Partial 6.7 + 58254/8760 = 13.35;
    # the convertible 11.0 is not a standard offer. 3yr: 9.5 against 236520/26280 = 9.0.
    assert rates[("us-east-1", "p4d.24xlarge", "1yr")] == pytest.approx(13.0)
    assert rates[("us-east-1", "p4d.24xlarge", "3yr")] == pytest.approx(9.0)
    assert rates[("us-west-2", "p4d.24xlarge", "1yr")] == pytest.approx(14.1)
    assert rates[("us-east-1", "g5.xlarge", "1yr")] == pytest.approx(0.634)
    assert ("us-west-2", "p4d.24xlarge", "3yr") not in rates
    assert len(rates) == 5  # the malformed entries are skipped (m6i.large is a row too)


def test_effective_rate_rejects_other_classes_and_bad_figures() -> None:
    base = {"LeaseContractLength": "1yr", "OfferingClass": "standard", "PurchaseOption": "x"}
    dims = {"a": {"unit": "Hrs", "pricePerUnit": {"USD": "2.0"}}}
    assert effective_rate({"termAttributes": base, "priceDimensions": dims}) == ("1yr", 2.0)
    convertible = {**base, "OfferingClass": "convertible"}
    assert effective_rate({"termAttributes": convertible, "priceDimensions": dims}) is None
    bad = {"a": {"unit": "Hrs", "pricePerUnit": {"USD": "-1"}}}
    assert effective_rate({"termAttributes": base, "priceDimensions": bad}) is None
    five = {**base, "LeaseContractLength": "5yr"}
    assert effective_rate({"termAttributes": five, "priceDimensions": dims}) is None


_LEAF = st.one_of(st.none(), st.integers(), st.text(max_size=8))
_JUNK = st.one_of(st.text(max_size=30), st.dictionaries(st.text(max_size=8), _LEAF, max_size=3))


@settings(max_examples=60, deadline=None)
@given(st.lists(_JUNK, max_size=5))
def test_parser_never_crashes_on_junk(entries: list[Any]) -> None:
    assert isinstance(reserved_rates(entries), dict)


def test_apply_sets_only_the_aws_rows_it_has_rates_for() -> None:
    offers = Catalog.load(bundled_only=True).offers
    table, hits = apply(offers, reserved_rates(_price_list()))
    aws = table.provider == "aws"
    p4d = aws & (table.region == "us-east-1") & (table.instance_type == "p4d.24xlarge")
    g5 = aws & (table.region == "us-east-1") & (table.instance_type == "g5.xlarge")
    west = aws & (table.region == "us-west-2") & (table.instance_type == "p4d.24xlarge")
    m6i = aws & (table.region == "us-east-1") & (table.instance_type == "m6i.large")  # CPU-only
    assert p4d.any() and g5.any() and west.any() and m6i.any()
    assert hits == int(p4d.sum() + g5.sum() + west.sum() + m6i.sum())
    assert np.allclose(table.price_reserved_1y[p4d], 13.0)
    assert np.allclose(table.price_reserved_3y[p4d], 9.0)
    assert np.allclose(table.price_reserved_1y[west], 14.1)
    assert np.isnan(table.price_reserved_3y[west]).all()
    assert np.allclose(table.price_reserved_1y[m6i], 0.06)
    assert np.isnan(table.price_reserved_1y[~(p4d | g5 | west | m6i)]).all()
    assert len(table) == len(offers)


# -- a real boto3 Pricing client against a local GetProducts server ------------------------------


class _Pricing(http.server.BaseHTTPRequestHandler):
    deny = False
    calls: list[dict[str, Any]] = []  # noqa: RUF012

    def log_message(self, *args: object) -> None:
        return

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
        type(self).calls.append({"target": self.headers.get("X-Amz-Target"), **body})
        if type(self).deny:
            self._send(400, {"__type": "AccessDeniedException", "message": "not allowed"})
            return
        region = next(f["Value"] for f in body["Filters"] if f["Field"] == "regionCode")
        mine = [p for p in _price_list() if f'"regionCode": "{region}"' in p]
        start = int(body.get("NextToken") or 0)  # one product per page: pagination is used
        page: dict[str, Any] = {"FormatVersion": "aws_v1", "PriceList": mine[start : start + 1]}
        if start + 1 < len(mine):
            page["NextToken"] = str(start + 1)
        self._send(200, page)

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/x-amz-json-1.1")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def pricing_api(aws_env: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[type[_Pricing]]:  # noqa: F811
    urllib.request.urlopen(
        urllib.request.Request(f"{aws_env}/moto-api/reset", method="POST"), timeout=10
    ).close()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Pricing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("AWS_ENDPOINT_URL_PRICING", f"http://127.0.0.1:{server.server_port}")
    monkeypatch.setenv(URL_ENV, UNREACHABLE)
    _Pricing.deny, _Pricing.calls = False, []
    yield _Pricing
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


def test_update_fills_the_reserved_columns_from_the_pricing_api(
    pricing_api: type[_Pricing],
) -> None:
    result = update_from_aws(["us-east-1"], today=date(2027, 1, 15))
    assert result.notes == [] and result.stats["rows with reserved prices"] > 0
    assert {c["target"] for c in pricing_api.calls} == {"AWSPriceListService.GetProducts"}
    assert len(pricing_api.calls) == 3  # three us-east-1 products, one per page
    filters = {f["Field"]: f["Value"] for f in pricing_api.calls[0]["Filters"]}
    assert filters == {"operatingSystem": "Linux", "tenancy": "Shared", "preInstalledSw": "NA",
                       "capacitystatus": "Used", "regionCode": "us-east-1"}  # fmt: skip
    o = Catalog.load().offers
    p4d = (o.provider == "aws") & (o.region == "us-east-1") & (o.instance_type == "p4d.24xlarge")
    assert p4d.any() and np.allclose(o.price_reserved_1y[p4d], 13.0)
    assert np.allclose(o.price_reserved_3y[p4d], 9.0)
    assert not (o.provider != "aws")[np.isfinite(o.price_reserved_1y)].any()


def test_a_denied_pricing_api_is_a_note_and_the_update_goes_on(
    pricing_api: type[_Pricing],
) -> None:
    pricing_api.deny = True
    result = update_from_aws(["us-east-1"], today=date(2027, 1, 15))
    assert result.rows > 0 and len(result.notes) == 1
    assert "pricing:GetProducts" in result.notes[0] and "AccessDenied" in result.notes[0]
    assert cache_info()["aws_live"]["notes"] == result.notes  # type: ignore[index]
    o = Catalog.load().offers
    assert not np.isfinite(o.price_reserved_1y).any()
    assert not np.isfinite(o.price_reserved_3y).any()
