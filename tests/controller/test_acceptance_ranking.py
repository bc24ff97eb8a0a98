"""An offer that delivered a node failing acceptance is ranked last by the launch planning while
it is degraded (the server's ``launch_targets(..., degraded=...)``), the rest keeping the
optimizer's order; and ``providers.local.node_cgroups`` (the slowed node of the done-when test)
refuses bad values naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpulease.catalog import Catalog
from gpulease.errors import UserInputError
from gpulease.providers.local import LocalProvider
from gpulease.providers.registry import runtime_catalog
from gpulease.providers.sim import SimProvider
from gpulease.server.planning import launch_targets
from tests.optimizer.conftest import make_task


def test_a_degraded_offer_is_ranked_after_every_other_plan(tmp_path: Path) -> None:
    sim = SimProvider.from_config({}, tmp_path / "sim")
    catalog = runtime_catalog({"sim": sim}, base=Catalog.load(bundled_only=True))
    task = make_task(resources={"cpus": "4+", "providers": ["sim"]})
    plain = launch_targets(task, catalog, frozenset({"sim"}))
    assert len(plain) >= 3
    first = plain[0]
    offer = (first.provider, first.region, first.instance_type)
    ranked = launch_targets(task, catalog, frozenset({"sim"}), degraded={offer: "matmul.fp32"})
    key = [(t.provider, t.region, t.instance_type) for t in ranked]
    assert offer not in key[: -sum(k == offer for k in key)]  # every plan of it comes last
    assert [t for t in ranked if (t.provider, t.region, t.instance_type) != offer] == [
        t for t in plain if (t.provider, t.region, t.instance_type) != offer
    ]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([1], "providers.local.node_cgroups: {rank: cgroup dir}"),
        ({"one": "/sys/fs/cgroup/cpu"}, "providers.local.node_cgroups.one: the key is a node rank"),
        ({1: "relative/dir"}, "providers.local.node_cgroups.1: 'relative/dir' is not a cgroup"),
    ],
)
def test_node_cgroups_refuses_bad_values_naming_the_field(
    value: object, message: str, tmp_path: Path
) -> None:
    with pytest.raises(UserInputError) as raised:
        LocalProvider.from_config({"providers": {"local": {"node_cgroups": value,
                                                           "root": str(tmp_path)}}})  # fmt: skip
    assert message in str(raised.value)
