"""A task's container image: ``resources.image_id: docker:NAME[:TAG][@sha256:DIGEST]``.

SkyPilot's field and meaning: the task's setup and run go inside that image, on every provider
(the node agent drives the node's Docker or Podman). :func:`parse_docker_image` validates the
reference with the grammar of the OCI distribution reference (a lowercase repository path, an
optional registry host with a port, an optional tag, an optional sha256 digest) and gives it back
as written, less surrounding blanks; :func:`image_reference` drops the ``docker:`` scheme and
:func:`registry_of` names the registry the image comes from (``docker.io`` when the name has no
host), which is the key of its credentials in the config's ``containers.registries``
(:mod:`gpulease.config`).

Other schemes of ``image_id`` (an AWS AMI, GCP or Azure images) are handled by
:mod:`gpulease.spec.images`. Pure functions; moves no states.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BeforeValidator, WithJsonSchema

__all__ = [
    "DOCKER_SCHEME",
    "DockerImage",
    "image_reference",
    "is_docker_image",
    "parse_docker_image",
    "registry_of",
]

DOCKER_SCHEME = "docker:"
DEFAULT_REGISTRY = "docker.io"
MAX_NAME_LENGTH = 255  # the distribution spec's limit on a repository name, host included

_DOMAIN_PART = r"(?:[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9-]*[A-Za-z0-9])"
_DOMAIN = re.compile(rf"{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*(?::[0-9]{{1,5}})?")
_PATH_PART = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_DIGEST = re.compile(r"sha256:[a-f0-9]{64}")
_EXAMPLE = "as in docker:nvcr.io/nvidia/pytorch:24.01-py3 or docker:ubuntu@sha256:<64 hex>"


def is_docker_image(value: object) -> bool:
    """Whether ``value`` is a text with the ``docker:`` scheme (valid or not)."""
    return isinstance(value, str) and value.strip().startswith(DOCKER_SCHEME)


def parse_docker_image(value: object) -> str:
    """``value`` (``docker:REF``) stripped of blanks; ValueError naming what is wrong."""
    if not is_docker_image(value):
        raise ValueError(f"expected a container image docker:NAME[:TAG][@sha256:…], got {value!r}")
    assert isinstance(value, str)
    text = value.strip()
    reference = text[len(DOCKER_SCHEME) :]
    problem = _problem(reference)
    if problem is not None:
        raise ValueError(f"{text!r} is not a valid image reference: {problem} ({_EXAMPLE})")
    return text


def image_reference(image: str) -> str:
    """The reference a container engine pulls: ``docker:REF`` less its scheme."""
    return image.strip().removeprefix(DOCKER_SCHEME)


def registry_of(image: str) -> str:
    """The registry host (with its port) ``image`` is pulled from; ``docker.io`` by default."""
    first, _, rest = image_reference(image).partition("/")
    return first.lower() if rest and _is_host(first) else DEFAULT_REGISTRY


def _is_host(component: str) -> bool:
    """Docker's rule: a first component is a host when it has a dot, a port or is localhost."""
    return "." in component or ":" in component or component == "localhost"


def _problem(reference: str) -> str | None:
    """What is wrong with ``reference`` (NAME[:TAG][@DIGEST]), or None."""
    if not reference:
        return "the image name is empty"
    rest, at, digest = reference.partition("@")
    if at and not _DIGEST.fullmatch(digest):
        return f"the digest {digest!r} is not sha256: and 64 lowercase hex digits"
    head, slash, last = rest.rpartition("/")
    name, colon, tag = last.partition(":")
    if colon and not _TAG.fullmatch(tag):
        return f"the tag {tag!r} is not 1-128 letters, digits, '_', '.' or '-'"
    return _name_problem(f"{head}{slash}{name}")


def _name_problem(full: str) -> str | None:
    """What is wrong with the name ``full`` ([HOST/]PATH, no tag or digest), or None."""
    if len(full) > MAX_NAME_LENGTH:
        return f"the name is longer than {MAX_NAME_LENGTH} characters"
    parts = full.split("/")
    if len(parts) > 1 and _is_host(parts[0]):
        if not _DOMAIN.fullmatch(parts[0]):
            return f"the registry host {parts[0]!r} is not a host name with an optional port"
        parts = parts[1:]
    bad = next((part for part in parts if not _PATH_PART.fullmatch(part)), None)
    if bad is not None:
        return (
            f"the name part {bad!r} is not lowercase letters and digits "
            "separated by '.', '_', '__' or '-'"
        )
    return None


DockerImage = Annotated[
    str,
    BeforeValidator(parse_docker_image),
    WithJsonSchema({"type": "string", "pattern": "^\\s*docker:"}),
]
"""A validated ``docker:REF`` text, kept as written (less surrounding blanks)."""
