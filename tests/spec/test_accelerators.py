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
        ("MI300", "MI300X"),  # SkyPilot's name for the part
        ("mi325", "MI325X"),
        ("T4g", "T4"),  # AWS g5g: a T4 on an arm64 host
    ],
)
def test_aliases_map_to_the_canonical_cloud_spelling(alias: str, canonical: str) -> None:
    assert canonical_accelerator_name(alias) == canonical


@pytest.mark.parametrize(
    ("name", "suggestion"),
    [("A1000", "A100"), ("H10", "H100"), ("L40SS", "L40S"), ("MI3000", "MI300X")],
)
def test_unknown_name_suggests_the_closest(name: str, suggestion: str) -> None:
    with pytest.raises(ValueError, match="did you mean") as info:
        canonical_accelerator_name(name)
    assert suggestion in str(info.value)
    assert repr(name) in str(info.value)


@pytest.mark.parametrize("name", ["tpu-v5e-8", "tpu-v4-32", "TPU-V6E-1", "tpu_v3"])
def test_a_tpu_is_named_as_unsupported(name: str) -> None:
    with pytest.raises(ValueError, match="TPUs are not supported") as info:
        canonical_accelerator_name(name)
    assert repr(name) in str(info.value)


def test_unknown_name_without_close_match_lists_known_names() -> None:
    with pytest.raises(ValueError, match=r"known accelerators: .*H100"):
        canonical_accelerator_name("zzzzqqq")


@pytest.mark.parametrize(
    ("value", "options", "ordered"),
    [
        ("A100:8", [("A100", 8)], False),
        ("a100", [("A100", None)], False),
        ("a100:auto", [("A100", None)], False),
        (" h100 : 4 ", [("H100", 4)], False),
        ({"A100": 8, "H100": 8}, [("A100", 8), ("H100", 8)], False),
        ({"a100": None, "h100": 8}, [("A100", None), ("H100", 8)], False),
        ({"a100": "AUTO"}, [("A100", None)], False),
        ({"A100:8": None, "H100:8": None}, [("A100", 8), ("H100", 8)], False),
        ("{A100:8, H100:4}", [("A100", 8), ("H100", 4)], False),
        (["H100:8", "A100-80GB:8"], [("H100", 8), ("A100-80GB", 8)], True),
        ([{"H100": 8}, "a100"], [("H100", 8), ("A100", None)], True),
        ({"A100": 8.0}, [("A100", 8)], False),
        ({"A100": "8"}, [("A100", 8)], False),
        # SkyPilot's sets with one name at several counts (any one of them)
        (
            {"A100:4": None, "A100:8": None, "A100-80GB:2": None},
            [("A100", 4), ("A100", 8), ("A100-80GB", 2)],
            False,
        ),
        ("{A100:4, A100:8, A100-80GB:2}", [("A100", 4), ("A100", 8), ("A100-80GB", 2)], False),
        (["A100:8", "a100-40gb:4"], [("A100", 8), ("A100", 4)], True),
        (["A100:8", "a100:8", "H100:8"], [("A100", 8), ("H100", 8)], True),  # repeats kept once
    ],
)
def test_parse_accelerators_reads_all_forms(
    value: object, options: list[tuple[str, int | None]], ordered: bool
) -> None:
    assert parse_accelerators(value) == (options, ordered)


@pytest.mark.parametrize(("bare", "expected"), [(1, 1), (None, None)])
def test_a_name_without_a_count_takes_the_bare_count(
    bare: int | None, expected: int | None
) -> None:
    assert parse_accelerators("L4", bare=bare) == ([("L4", expected)], False)
    assert parse_accelerators({"L4": None, "T4": 2}, bare=bare) == (
        [("L4", expected), ("T4", 2)],
        False,
    )
    assert parse_accelerators("L4:auto", bare=bare) == ([("L4", None)], False)


def test_a_list_keeps_its_preference_order() -> None:
    options, ordered = parse_accelerators(["L4:1", "A10G:1", "T4:1"])
    assert ordered
    assert [name for name, _ in options] == ["L4", "A10G", "T4"]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("A100:x", "unknown accelerator count 'x'"),
        ("A100:autox", "or auto"),
        ("A100:0", "positive whole number"),
        ("A100:-1", "unknown accelerator count"),
        ("A100:1.5", "unknown accelerator count"),
        ({"A100": 0}, "positive whole number"),
        ({"A100": 1.5}, "positive whole number"),
        ({"A100": True}, "positive whole number"),
        ({"A100:8": 8}, "give the count of A100 once"),
        ([], "at least one"),
        ({}, "at least one"),
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
    ("options", "ordered", "written"),
    [
        ([("A100", 8)], False, "A100:8"),
        ([("A100", None)], False, "A100:auto"),
        ([("A100", 8), ("H100", None)], False, {"A100": 8, "H100": "auto"}),
        ([("A100", 4), ("A100", 8)], False, {"A100:4": None, "A100:8": None}),
        ([("A100", 8)], True, ["A100:8"]),
        ([("H100", 8), ("A100", 8)], True, ["H100:8", "A100:8"]),
    ],
)
def test_format_accelerators_writes_the_shortest_form(
    options: list[tuple[str, int | None]], ordered: bool, written: object
) -> None:
    assert format_accelerators(options, ordered) == written


_OPTIONS = st.lists(
    st.tuples(
        st.sampled_from(KNOWN_ACCELERATORS),
        st.one_of(st.none(), st.integers(min_value=1, max_value=64)),
    ),
    min_size=1,
    max_size=5,
    unique=True,
)


@examples(200)
@given(_OPTIONS, st.booleans())
def test_format_then_parse_gives_the_same_request(
    options: list[tuple[str, int | None]], ordered: bool
) -> None:
    parsed, parsed_ordered = parse_accelerators(format_accelerators(options, ordered), bare=1)
    assert parsed == options
    assert parsed_ordered == (ordered or False)


def test_accelerator_request_canonicalises_names_given_in_python() -> None:
    request = AcceleratorRequest(choices={"a100_80gb": 8, "h100": None})
    assert request.options == (("A100-80GB", 8), ("H100", None))
    assert request.names == ("A100-80GB", "H100")
    assert AcceleratorRequest(options=(("a100", 4), ("A100", 8))).counts_of("A100") == (4, 8)
