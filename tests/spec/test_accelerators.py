"""Accelerator names and the three accelerator forms (string, mapping, list)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpulease.spec import KNOWN_ACCELERATORS, AcceleratorRequest, canonical_accelerator_name
from gpulease.spec.accelerators import format_accelerators, parse_accelerators

from .strategies import examples


@pytest.mark.parametrize("name", KNOWN_ACCELERATORS)
def test_every_canonical_name_maps_to_itself_in_any_case(name: str) -> None:
    assert canonical_accelerator_name(name) == name
    assert canonical_accelerator_name(name.lower()) == name
    assert canonical_accelerator_name(name.upper()) == name


@pytest.mark.parametrize(
    ("alias", "canonical"),
    [
        ("a100-40gb", "A100"),
        ("A100 40GB", "A100"),
        ("a100_80gb", "A100-80GB"),
        ("A100-SXM4-80GB", "A100-80GB"),
        ("NVIDIA A100 80GB PCIe", "A100-80GB"),
        ("h100-80gb", "H100"),
        ("H100-SXM5", "H100"),
        ("h100_pcie", "H100-PCIe"),  # H100 is the SXM part; PCIe and NVL have their own names
        ("H100 PCIe 80GB", "H100-PCIe"),
        ("h100nvl", "H100-NVL"),
        ("H200 NVL", "H200-NVL"),
        ("A100-PCIe", "A100"),  # A100 keeps one name per memory size
        ("h800", "H800"),
        ("H800-SXM5", "H800"),
        ("h800 pcie", "H800-PCIe"),
        ("h20", "H20"),
        ("A800-SXM4-80GB", "A800"),
        ("a800_pcie", "A800-PCIe"),
        ("l20", "L20"),
        ("4090", "RTX4090"),
        ("GeForce RTX 4090", "RTX4090"),
        ("rtx_5090", "RTX5090"),
        ("gb200", "GB200"),
        ("mi325x", "MI325X"),
        ("Gaudi 3", "Gaudi3"),
        ("RTXA6000", "A6000"),
        ("rtx-a6000", "A6000"),
        ("Tesla V100-SXM2-16GB", "V100"),
        ("v100_32gb", "V100-32GB"),
        ("tesla t4", "T4"),
        ("a10g", "A10G"),
        ("l40s", "L40S"),
        ("gh200", "GH200"),
        ("AMD Instinct MI300X", "MI300X"),
        ("mi250x", "MI250X"),
        ("gaudi2", "Gaudi2"),
        ("HL-225", "Gaudi2"),
        ("rtx6000ada", "RTX6000-Ada"),
        ("trn1", "Trainium"),
    ],
)
def test_aliases_map_to_the_canonical_cloud_spelling(alias: str, canonical: str) -> None:
    assert canonical_accelerator_name(alias) == canonical


@pytest.mark.parametrize(
    ("name", "suggestion"),
    [("A1000", "A100"), ("H10", "H100"), ("L40SS", "L40S"), ("MI300", "MI300X")],
)
def test_unknown_name_suggests_the_closest(name: str, suggestion: str) -> None:
    with pytest.raises(ValueError, match="did you mean") as info:
        canonical_accelerator_name(name)
    assert suggestion in str(info.value)
    assert repr(name) in str(info.value)


def test_unknown_name_without_close_match_lists_known_names() -> None:
    with pytest.raises(ValueError, match=r"known accelerators: .*H100"):
        canonical_accelerator_name("zzzzqqq")


@pytest.mark.parametrize(
    ("value", "choices", "ordered"),
    [
        ("A100:8", {"A100": 8}, False),
        ("a100", {"A100": None}, False),
        (" h100 : 4 ", {"H100": 4}, False),
        ({"A100": 8, "H100": 8}, {"A100": 8, "H100": 8}, False),
        ({"a100": None, "h100": 8}, {"A100": None, "H100": 8}, False),
        ({"A100:8": None, "H100:8": None}, {"A100": 8, "H100": 8}, False),
        ("{A100:8, H100:4}", {"A100": 8, "H100": 4}, False),
        (["H100:8", "A100-80GB:8"], {"H100": 8, "A100-80GB": 8}, True),
        ([{"H100": 8}, "a100"], {"H100": 8, "A100": None}, True),
        ({"A100": 8.0}, {"A100": 8}, False),
        ({"A100": "8"}, {"A100": 8}, False),
    ],
)
def test_parse_accelerators_reads_all_forms(
    value: object, choices: dict[str, int | None], ordered: bool
) -> None:
    assert parse_accelerators(value) == (choices, ordered)


def test_a_list_keeps_its_preference_order() -> None:
    choices, ordered = parse_accelerators(["L4:1", "A10G:1", "T4:1"])
    assert ordered
    assert list(choices) == ["L4", "A10G", "T4"]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("A100:x", "unknown accelerator count 'x'"),
        ("A100:0", "positive whole number"),
        ("A100:-1", "unknown accelerator count"),
        ("A100:1.5", "unknown accelerator count"),
        ({"A100": 0}, "positive whole number"),
        ({"A100": 1.5}, "positive whole number"),
        ({"A100": True}, "positive whole number"),
        ({"A100:8": 8}, "give the count of A100 once"),
        ([], "at least one"),
        ({}, "at least one"),
        (["A100:8", "a100-40gb:4"], "listed twice"),
        ([["A100"]], "expected list items"),
        ([{"A100": 8, "H100": 8}], "expected list items"),
        ({8: 8}, "accelerator name"),
        (8, "got int"),
        (":8", "expected an accelerator"),
        ("A1000:8", "did you mean"),
    ],
)
def test_parse_accelerators_refuses_bad_requests(value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_accelerators(value)


@pytest.mark.parametrize(
    ("choices", "ordered", "written"),
    [
        ({"A100": 8}, False, "A100:8"),
        ({"A100": None}, False, "A100"),
        ({"A100": 8, "H100": None}, False, {"A100": 8, "H100": None}),
        ({"A100": 8}, True, ["A100:8"]),
        ({"H100": 8, "A100": 8}, True, ["H100:8", "A100:8"]),
    ],
)
def test_format_accelerators_writes_the_shortest_form(
    choices: dict[str, int | None], ordered: bool, written: object
) -> None:
    assert format_accelerators(choices, ordered) == written


_CHOICES = st.dictionaries(
    st.sampled_from(KNOWN_ACCELERATORS),
    st.one_of(st.none(), st.integers(min_value=1, max_value=64)),
    min_size=1,
    max_size=5,
)


@examples(200)
@given(_CHOICES, st.booleans())
def test_format_then_parse_gives_the_same_request(
    choices: dict[str, int | None], ordered: bool
) -> None:
    parsed, parsed_ordered = parse_accelerators(format_accelerators(choices, ordered))
    assert parsed == choices
    assert list(parsed) == list(choices)
    assert parsed_ordered == (ordered or False)


def test_accelerator_request_canonicalises_names_given_in_python() -> None:
    request = AcceleratorRequest(choices={"a100_80gb": 8, "h100": None})
    assert request.choices == {"A100-80GB": 8, "H100": None}
