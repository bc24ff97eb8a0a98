"""`gpulease tco` (cost/tco.py): exact arithmetic on a hand-written catalog, the catalog's
cheapest offers of the server's GPU count, commitments (published, the user's discount, a
fallback), currencies, sourced defaults, and the CLI with examples/tco-8xa100.yaml."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import gpulease
from gpulease.catalog import Catalog
from gpulease.cost.tco import HOURS_PER_MONTH, tco
from gpulease.cost.tco_input import defaults, tco_input
from gpulease.errors import UserInputError
from tests.cli.conftest import Cli

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "tco-8xa100.yaml"
OWNED = {
    "purchase_per_server": 200_000, "server_watts": 6500, "pue": 1.5, "electricity_per_kwh": 0.1,
    "colocation_per_kw_month": 150, "depreciation_months": 48, "ops_fte": 0.5,
    "ops_cost_per_fte_year": 120_000,
}  # fmt: skip


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return Catalog.from_csv(Path(__file__).parent / "fixtures" / "offers.csv")


def _run(catalog: Catalog, config: dict | None = None, **values: object):  # type: ignore[no-untyped-def]
    base = {"gpus": "A100-80GB:16", "months": 12, "hours_per_month": 365, **OWNED}
    return tco(tco_input({**base, **values}), catalog=catalog, config=config or {})


def test_exact_arithmetic_on_one_providers_offers(catalog: Catalog) -> None:
    r = _run(catalog, providers=["aws"])
    assert r.inputs.servers == 2 and r.used_gpu_hours == 365 * 12 * 16
    assert r.rent["on_demand"].total == pytest.approx(27.45 * 365 * 12 * 2)  # 240,462
    assert r.rent["spot"].total == pytest.approx(10.00 * 365 * 12 * 2)  # 87,600
    # a 1y commitment bills every hour of its 12 months at the reserved price
    assert r.rent["committed"].total == pytest.approx(17.00 * 730 * 12 * 2)  # 297,840
    assert r.rent["committed"].billed_hours == pytest.approx(12 * HOURS_PER_MONTH)
    assert r.rent["on_demand"].source == "catalog: aws us-east-1 p4de.24xlarge"
    kw = 2 * 6.5
    assert r.owned == pytest.approx({
        "capex": 400_000.0,
        "depreciation": 400_000 * 12 / 48,  # 100,000
        "power": kw * 365 * 12 * 1.5 * 0.1,  # 8,541
        "colocation": kw * 150 * 12,  # 23,400
        "ops": 0.5 * 120_000,  # 60,000
        "total": 100_000 + 8_541 + 23_400 + 60_000,
    })  # fmt: skip
    fixed_month = 400_000 / 48 + kw * 150 + 60_000 / 12
    assert r.break_even["owned_vs_on_demand"] == pytest.approx(
        fixed_month / (27.45 * 2 - kw * 1.5 * 0.1) / 730
    )
    assert r.break_even["committed_vs_on_demand"] == pytest.approx(17.00 / 27.45)
    assert r.cheapest() == "spot" and r.sources == {}  # every input given: no default used
    d = r.to_dict()
    assert d["per_used_gpu_hour"]["owned"] == pytest.approx(191_941 / (365 * 12 * 16))


def test_the_cheapest_offer_of_the_server_gpu_count_per_pricing(catalog: Catalog) -> None:
    r = _run(catalog)
    # lambda is the cheapest on-demand 8-GPU server; the 4-GPU gcp offer never counts
    assert r.rent["on_demand"].source == "catalog: lambda us-east-1 gpu_8x_a100_80gb_sxm4"
    assert r.rent["spot"].per_server_hour == pytest.approx(10.00)
    assert r.rent["committed"].per_server_hour == pytest.approx(17.00)
    four = _run(catalog, gpus_per_server=4)
    assert four.inputs.servers == 4 and four.rent["on_demand"].per_server_hour == 9.00
    assert four.rent["committed"].total == pytest.approx(5.00 * 730 * 12 * 4)


def test_3y_commitment_bills_whole_terms_and_says_so(catalog: Catalog) -> None:
    r = _run(catalog, commitment="3y", months=6, providers=["aws"])
    assert r.rent["committed"].total == pytest.approx(12.00 * 730 * 36 * 2)
    assert any("bills whole terms: 36 months" in n for n in r.notes)


def test_the_users_discount_prices_the_commitment_and_is_named(catalog: Catalog) -> None:
    config = {"pricing": {"discounts": [{"provider": "gcp", "commitment": "1y", "discount": 0.6}]}}
    r = _run(catalog, config)
    assert r.rent["committed"].per_server_hour == pytest.approx(40.00 * 0.4)  # 16 < aws 17
    assert "gcp europe-west4" in r.rent["committed"].source
    assert "negotiated" in r.rent["committed"].source


def test_committed_off_is_the_fallback_without_a_committed_price(catalog: Catalog) -> None:
    none = _run(catalog, providers=["lambda"])
    assert none.rent["committed"].total is None
    assert "--committed-off" in none.rent["committed"].source
    # only the published discounts of the providers asked about, for the term, as reference
    assert none.published == () and none.to_dict()["published_discounts"] == []
    gcp = _run(catalog, providers=["gcp"], commitment="3y").to_dict()["published_discounts"]
    assert {(p["provider"], p["commitment"]) for p in gcp} == {("gcp", "3y")} and len(gcp) == 2
    r = _run(catalog, providers=["lambda"], committed_off="30%")
    assert r.rent["committed"].per_server_hour == pytest.approx(14.32 * 0.7)
    assert r.rent["spot"].total is None and r.break_even["owned_vs_spot"] is None


def test_currency_multiplies_catalog_prices_and_defaults_not_given_figures(
    catalog: Catalog,
) -> None:
    usd = _run(catalog, providers=["aws"])
    cny = _run(catalog, providers=["aws"], currency="cny", rate=7.2)
    assert cny.inputs.currency == "CNY"
    assert cny.rent["on_demand"].total == pytest.approx(usd.rent["on_demand"].total * 7.2)  # type: ignore[operator]
    assert cny.owned == pytest.approx(usd.owned)  # every owned figure was given, in CNY
    partial = {k: v for k, v in OWNED.items() if k != "electricity_per_kwh"}
    base = {"gpus": "A100-80GB:8", "months": 1, "hours_per_month": 100, **partial}
    r = tco(tco_input({**base, "currency": "CNY", "rate": 7.2}), catalog=catalog, config={})
    kwh = defaults()["electricity_per_kwh"]
    assert r.sources == {"electricity_per_kwh": kwh}
    assert r.owned["power"] == pytest.approx(6.5 * 100 * 1.5 * kwh.value * 7.2)


def test_defaults_carry_sources_and_fill_every_owned_input(catalog: Catalog) -> None:
    r = tco(tco_input({"gpus": "A100-80GB:8", "months": 36, "hours_per_month": 500}),
            catalog=catalog, config={})  # fmt: skip
    table = defaults()
    assert set(r.sources) == {
        "server_price.A100-80GB", "host_watts", "pue", "electricity_per_kwh",
        "colocation_per_kw_month", "depreciation_months", "ops_fte", "ops_cost_per_fte_year",
    }  # fmt: skip
    assert all(d.source and d.source_date[:2] in ("20",) for d in table.values())
    # server watts = 8 GPUs at the part's TDP (400 W) + the host's
    assert r.server_watts == pytest.approx(8 * 400 + table["host_watts"].value)
    assert r.owned["capex"] == table["server_price.A100-80GB"].value
    with pytest.raises(UserInputError, match="--purchase-per-server"):
        tco(tco_input({"gpus": "H100:8", "months": 1, "hours_per_month": 1}), catalog=catalog,
            config={})  # fmt: skip


def test_sdk_keywords(catalog: Catalog) -> None:
    r = gpulease.tco(gpus="A100-80GB:8", months=2, hours_per_month=100, catalog=catalog,
                     config={}, **OWNED)  # fmt: skip
    assert r.rent["on_demand"].total == pytest.approx(14.32 * 200)
    with pytest.raises(UserInputError, match="hours-per-month"):
        gpulease.tco(gpus="A100-80GB:8", months=2, catalog=catalog, config={})


# -- the CLI --------------------------------------------------------------------------------------


def test_cli_example_reproduces_the_practice_and_says_where_it_differs(tmp_path: Path) -> None:
    cli = Cli(tmp_path / "home")
    out = cli("tco", "--from", str(EXAMPLE), "--json", check=True)
    d = json.loads(out.stdout)
    bundled = Catalog.load(bundled_only=True).offers
    eight = (bundled.accelerator == "A100-80GB") & (bundled.gpu_count == 8)
    cheapest = float(bundled.price_on_demand[eight].min())
    assert (d["servers"], d["currency"], d["hours_per_month"]) == (8, "CNY", 720)
    assert d["rent"]["on_demand"]["total"] == pytest.approx(8 * 720 * cheapest * 7.2)
    assert d["owned"]["capex"] == 8_000_000
    assert d["owned"]["depreciation"] == pytest.approx(8_000_000 / 60)
    rented = d["compare"]["rented_on_demand"]
    assert rented["theirs"] == 240_000 and rented["ratio"] == pytest.approx(
        8 * 720 * cheapest * 7.2 / 240_000
    )
    assert d["compare"]["hardware"]["today"] == pytest.approx(8 * 199_000 * 7.2)
    assert d["rent"]["committed"]["source"].startswith("on-demand less --committed-off 30%")
    text = cli("tco", "--from", str(EXAMPLE), "--months", "2", check=True).stdout
    assert "for 2 months" in text and "against the practice" in text and "CNY" in text
    assert "break-even utilisation" in text and "tco_defaults.csv" in text


# each field's own checks run in process: test_tco_input.py
BASE_ARGS = ["--gpus", "A100-80GB:8", "--months", "3", "--hours-per-month", "5"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gpus", "A100-80GB", "--months", "3", "--hours-per-month", "5"], "--gpus"),
        (["--gpus", "A100-80GB:8", "--months", "3"], "--hours-per-month is required"),
        ([*BASE_ARGS, "--currency", "yuan"], "currency"),
        (["--from", "/nonexistent/tco.yaml"], "--from"),
    ],
)
def test_cli_bad_input_is_exit_2_naming_it(tmp_path: Path, args: list[str], message: str) -> None:
    out = Cli(tmp_path / "home")("tco", *args)
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr
