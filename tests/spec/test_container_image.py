"""``resources.image_id: docker:REF``: the reference's grammar, the task field, the wire."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpulease.errors import SpecError
from gpulease.server.tasks import run_spec
from gpulease.spec import parse_task_with_warnings
from gpulease.spec.container_image import image_reference, parse_docker_image, registry_of
from gpulease.wire import NodeTask

from .strategies import examples

_DIGEST = "sha256:" + "0123456789abcdef" * 4
_ALNUM = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=6)
# no "." in a path part: a dotted first part is a registry host (Docker's rule), tested above
_PART = st.lists(_ALNUM, min_size=1, max_size=3).flatmap(
    lambda words: st.sampled_from(["_", "__", "-"]).map(lambda sep: sep.join(words))
)
_HOST = st.one_of(
    st.just(""),
    st.builds(
        "{}.{}{}/".format,
        _ALNUM,
        st.sampled_from(["io", "com", "dev"]),
        st.sampled_from(["", ":5000", ":443"]),
    ),
    st.just("localhost:5000/"),
)
_TAG = st.one_of(
    st.just(""),
    st.builds(
        "{}{}".format, st.sampled_from([":1", ":_", ":V"]), st.text("abc.-_019", max_size=20)
    ),
)
_AT = st.sampled_from(["", "@" + _DIGEST])


@pytest.mark.parametrize(
    ("image", "registry"),
    [
        ("docker:ubuntu", "docker.io"),
        ("docker:ubuntu:22.04", "docker.io"),
        ("docker:nvcr.io/nvidia/pytorch:24.01-py3", "nvcr.io"),
        ("docker:winglian/axolotl:main-py3.10-cu118-2.0.1", "docker.io"),
        ("docker:localhost:5000/team/img:v1", "localhost:5000"),
        (f"docker:ghcr.io/org/img@{_DIGEST}", "ghcr.io"),
        (f"docker:ghcr.io/org/img:v2@{_DIGEST}", "ghcr.io"),
        ("  docker:rocm/pytorch-training:v25.6  ", "docker.io"),
    ],
)
def test_valid_references_and_their_registry(image: str, registry: str) -> None:
    assert parse_docker_image(image) == image.strip()
    assert registry_of(image) == registry
    assert image_reference(image) == image.strip().removeprefix("docker:")


@pytest.mark.parametrize(
    ("image", "problem"),
    [
        ("docker:", "the image name is empty"),
        ("docker:Ubuntu", "name part 'Ubuntu'"),
        ("docker:ubuntu:", "the tag ''"),
        ("docker:ubuntu:-x", "the tag '-x'"),
        ("docker:ubuntu@sha256:abc", "digest 'sha256:abc'"),
        ("docker:a//b", "name part ''"),
        ("docker:-bad.io/x", "registry host '-bad.io'"),
        ("docker:" + "a" * 256, "longer than 255"),
        ("ubuntu", "expected a container image docker:"),
    ],
)
def test_invalid_references_say_what_is_wrong(image: str, problem: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_docker_image(image)
    assert problem in str(info.value)


@examples(200)
@given(_HOST, st.lists(_PART, min_size=1, max_size=3), _TAG, _AT)
def test_any_well_formed_reference_parses_as_written(
    host: str, parts: list[str], tag: str, at: str
) -> None:
    image = f"docker:{host}{'/'.join(parts)}{tag}{at}"
    assert parse_docker_image(image) == image
    assert registry_of(image) == (host.rstrip("/") or "docker.io")


@examples(200)
@given(st.text(max_size=40))
def test_no_text_raises_anything_but_value_error(text: str) -> None:
    try:
        parsed = parse_docker_image("docker:" + text)
    except ValueError:
        return
    assert parsed.startswith("docker:")
    assert registry_of(parsed)


def test_a_native_task_takes_the_image_without_a_warning() -> None:
    task, warnings = parse_task_with_warnings(
        "resources:\n  image_id: docker:ghcr.io/org/train:v1\nrun: python train.py\n", "t.yaml"
    )
    assert task.resources.image_id == "docker:ghcr.io/org/train:v1"
    assert warnings == []


def test_a_bad_reference_is_an_error_naming_the_field_and_line() -> None:
    with pytest.raises(SpecError, match=r"t\.yaml:3: resources\.image_id: 'docker:Org/x'"):
        parse_task_with_warnings("run: x\nresources:\n  image_id: docker:Org/x\n", "t.yaml")


def test_an_ami_keeps_its_skypilot_meaning() -> None:
    task, _ = parse_task_with_warnings("resources:\n  image_id: ami-0123abcd\n", "t.yaml")
    assert task.resources.image_id is None
    assert task.resources.provider_config == {"aws": {"ami": "ami-0123abcd"}}
    assert task.resources.providers == ["aws"]


def test_the_image_and_its_registry_reach_the_node_task() -> None:
    task, _ = parse_task_with_warnings(
        "resources:\n  image_id: docker:nvcr.io/nvidia/pytorch:24.01-py3\nrun: nvidia-smi\n"
    )
    run = run_spec(task)
    assert (run.image, run.image_registry) == ("nvcr.io/nvidia/pytorch:24.01-py3", "nvcr.io")
    node = NodeTask.for_node(run, task_id="t-1", rank=0, node_ips=("10.0.0.1",), gpus_per_node=8)
    body = node.wire()
    assert (body["image"], body["image_registry"]) == (run.image, "nvcr.io")
    assert NodeTask.model_validate(body) == node


def test_a_task_without_an_image_sends_no_image_fields() -> None:
    task, _ = parse_task_with_warnings("run: echo hi\n")
    node = NodeTask.for_node(
        run_spec(task), task_id="t-1", rank=0, node_ips=("10.0.0.1",), gpus_per_node=0
    )
    assert node.image is None
    assert "image" not in node.wire() and "image_registry" not in node.wire()
