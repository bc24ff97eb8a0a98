"""Data classes: built-ins and user-defined classes allow exactly the offers they should."""

from __future__ import annotations

import numpy as np
import pytest

from gpulease.errors import UserInputError
from gpulease.policy import (
    BUILTIN_DATA_CLASSES,
    evaluate_data_policy,
    load_data_classes,
    resolve_data_classes,
)

PROVIDER = np.array(["aws", "aws", "lambda", "gcp", "runpod"])
REGION = np.array(["us-east-1", "eu-west-1", "us-east-1", "europe-west4", "SE"])
COUNTRY = np.array(["US", "IE", "US", "NL", "SE"])
CERTS = np.array(["hipaa", "hipaa", "", "hipaa;soc2", "soc2"])


def _verdict(names: list[str], config: dict[str, object] | None = None):  # type: ignore[no-untyped-def]
    classes = resolve_data_classes(names, load_data_classes(config))
    return evaluate_data_policy(
        classes, provider=PROVIDER, region=REGION, country=COUNTRY, certifications=CERTS
    )


def test_phi_keeps_only_providers_with_a_baa_on_record() -> None:
    verdict = _verdict(["phi"])
    assert verdict.allowed.tolist() == [True, True, False, True, False]
    ((reason, count),) = verdict.reasons
    assert count == 2 and "HIPAA BAA" in reason and "lambda" in reason and "runpod" in reason


def test_eu_resident_keeps_eu_and_eea_regions_only() -> None:
    verdict = _verdict(["eu-resident"])
    assert verdict.allowed.tolist() == [False, True, False, True, True]
    assert "EU/EEA" in verdict.reasons[0][0]


def test_classes_combine_and_each_rejection_is_counted_once() -> None:
    verdict = _verdict(["eu-resident", "phi"])
    assert verdict.allowed.tolist() == [False, True, False, True, False]
    assert sum(count for _, count in verdict.reasons) == 3


def test_aliases_match_their_built_ins() -> None:
    assert BUILTIN_DATA_CLASSES["hipaa"] is BUILTIN_DATA_CLASSES["phi"]
    assert BUILTIN_DATA_CLASSES["gdpr"] is BUILTIN_DATA_CLASSES["eu-resident"]


def test_user_defined_class_from_config() -> None:
    config = {
        "data_classes": {
            "clinical": {
                "providers": ["aws", "gcp"],
                "regions": ["eu-*"],
                "certifications": "hipaa",
            }
        }
    }
    verdict = _verdict(["clinical"], config)
    assert verdict.allowed.tolist() == [False, True, False, False, False]
    reasons = " | ".join(r for r, _ in verdict.reasons)
    assert "provider not allowed" in reasons and "region not in eu-*" in reasons


def test_unknown_class_suggests_the_closest_name() -> None:
    with pytest.raises(UserInputError, match=r"did you mean 'eu-resident'"):
        resolve_data_classes(["eu-resident2"], load_data_classes({}))


@pytest.mark.parametrize(
    "bad",
    [
        {"data_classes": ["phi"]},
        {"data_classes": {"x": "aws"}},
        {"data_classes": {"x": {"providerz": ["aws"]}}},
        {"data_classes": {"x": {"providers": [1, 2]}}},
    ],
)
def test_bad_config_names_the_field(bad: dict[str, object]) -> None:
    with pytest.raises(UserInputError, match="data_classes"):
        load_data_classes(bad)
