"""HostStager: staged copies are isolated from the live tensors, buffers are reused between saves
and released when no longer needed."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from gpulease.train.snapshot import HostStager  # noqa: E402


def test_staging_copies_and_reuses_buffers_and_releases_stale_ones() -> None:
    model = torch.nn.Linear(64, 64)
    stager = HostStager()

    first = stager.stage_all({"model": model.state_dict()})
    with torch.no_grad():
        model.weight.add_(1.0)  # training goes on after save() returned
    assert not torch.equal(first["model"]["weight"], model.weight)
    assert first["model"]["weight"].data_ptr() != model.weight.data_ptr()

    second = stager.stage_all({"model": model.state_dict()})
    assert torch.equal(second["model"]["weight"], model.weight)
    assert second["model"]["weight"].data_ptr() == first["model"]["weight"].data_ptr()  # reused

    bigger = torch.nn.Linear(64, 128)
    third = stager.stage_all({"model": bigger.state_dict(), "other": model.state_dict()})
    assert torch.equal(third["model"]["weight"], bigger.weight)
    stager.stage_all({"other": model.state_dict()})
    assert all(key[0] == "other" for key in stager._buffers)  # the model's buffers were released


def test_small_and_nested_values_are_plain_copies() -> None:
    stager = HostStager()
    state = {"step": torch.tensor(3), "groups": [{"lr": 0.1, "params": [0, 1]}], "name": "adam"}
    staged = stager.stage_all({"opt": state})["opt"]
    assert staged == {
        "step": torch.tensor(3),
        "groups": [{"lr": 0.1, "params": [0, 1]}],
        "name": "adam",
    }
    state["groups"][0]["lr"] = 0.2
    assert staged["groups"][0]["lr"] == 0.1
