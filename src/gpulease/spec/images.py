"""SkyPilot's ``resources.image_id``, mapped onto what gpulease honours: an AWS AMI.

``image_id: ami-0123…`` or a per-region mapping ``{us-east-1: ami-…, us-west-2: ami-…}`` becomes
``resources.provider_config.aws.ami`` (which the aws provider launches from) and limits the task
to aws, the only place an AMI exists: ``providers`` becomes ``[aws]`` (a list without aws, or
``exclude_providers`` naming it, is an error naming ``image_id``), and a per-region mapping
limits ``regions`` to its regions (listed regions it lacks are an error). A container image
``docker:REF`` stays in ``resources.image_id`` (a gpulease field too: the task runs in it, see
:mod:`gpulease.spec.container_image`), so it does not mark the file as SkyPilot's. Other forms
stay warnings naming the form: a docker image per region, GCP images
(``projects/…``), Azure URNs (``publisher:offer:sku:version``), SkyPilot's own image tags
(``skypilot:…``); a per-region mapping of such images still limits ``regions`` to its regions
(the file asks to run only where it has an image).

:func:`translate_image_id` runs inside the normalization pass (:mod:`gpulease.spec.normalize`),
after the resources were moved to gpulease names, on the resources mapping it built. Moves no
states.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpulease.spec.container_image import is_docker_image
from gpulease.spec.yaml_lines import Path

if TYPE_CHECKING:
    from gpulease.spec.normalize import Pass

__all__ = ["image_form", "translate_image_id"]

_RES = ("resources",)


def image_form(value: str) -> str | None:
    """What kind of image ``value`` names, for a warning; None for an AMI id."""
    text = value.strip()
    if text.startswith("ami-"):
        return None
    if text.startswith("docker:"):
        return "a docker image per region is not supported; give one image_id: docker:IMAGE"
    if text.startswith("skypilot:"):
        return "SkyPilot image tags (skypilot:…) are not known; give an AMI id (ami-…)"
    if text.startswith("projects/") or "/global/images/" in text:
        return "GCP images (projects/…) are not supported; only AWS AMIs (ami-…) are"
    if text.count(":") == 3:
        return (
            "Azure image URNs (publisher:offer:sku:version) are not supported; "
            "only AWS AMIs (ami-…) are"
        )
    return "only AWS AMI ids (ami-…) are honoured"


def translate_image_id(step: Pass, res: dict[Any, Any]) -> None:
    """Move ``res["image_id"]`` (if any) into ``provider_config.aws.ami``; see the module."""
    if "image_id" not in res or is_docker_image(res["image_id"]):
        return  # a container image: the Resources model validates it
    origin = step.out.origin((*_RES, "image_id"))
    _mark_skypilot(step, origin)
    value = res.pop("image_id")
    ami = _ami(step, value, origin)
    if ami is None:
        if isinstance(value, dict) and all(isinstance(k, str) and k.strip() for k in value):
            # images per region that gpulease cannot use: the file still runs only there
            _only_regions(step, res, sorted(k.strip() for k in value), origin)
        return
    _put_ami(step, res, ami, origin)
    _only_aws(step, res, origin)
    if isinstance(ami, dict):
        _only_regions(step, res, sorted(ami), origin)


def _mark_skypilot(step: Pass, origin: Path) -> None:
    """List ``origin`` among the SkyPilot fields where the resources pass would have: before the
    first resources field below it (the list is in the order the pass met the fields)."""
    found = step.out.skypilot
    if origin in found:
        return
    line = step.doc.line(origin) or 0
    later = (i for i, p in enumerate(found) if p[:1] == _RES and (step.doc.line(p) or 0) > line)
    found.insert(next(later, len(found)), origin)


def _ami(step: Pass, value: Any, origin: Path) -> str | dict[str, str] | None:
    """The AMI (or region → AMI) ``value`` names; None (with a warning) for another form."""
    if isinstance(value, str):
        form = image_form(value)
        if form is not None:
            step.ignore(origin, form)
            return None
        return value.strip()
    if isinstance(value, dict) and value:
        amis: dict[str, str] = {}
        for region, image in value.items():
            if not isinstance(region, str) or not region.strip() or not isinstance(image, str):
                raise step.doc.error(
                    (*origin, region), "expected region: AMI id, as in us-east-1: ami-0123abcd"
                )
            form = image_form(image)
            if form is not None:
                step.ignore((*origin, region), form)
                return None
            amis[region.strip()] = image.strip()
        return amis
    raise step.doc.error(
        origin, f"expected an AMI id (ami-…) or a mapping region: AMI id, got {value!r}"
    )


def _put_ami(step: Pass, res: dict[Any, Any], ami: str | dict[str, str], origin: Path) -> None:
    config = res.get("provider_config", {})
    aws = (config.get("aws") or {}) if isinstance(config, dict) else None
    if not isinstance(aws, dict):
        raise step.doc.error(origin, "resources.provider_config.aws must be a mapping to add it")
    if "ami" in aws:
        raise step.doc.error(
            origin, "conflicts with resources.provider_config.aws.ami (both set the AMI); give one"
        )
    res["provider_config"] = {**config, "aws": {**aws, "ami": ami}}
    step.out.renames[(*_RES, "provider_config", "aws", "ami")] = origin


def _names(value: Any) -> list[str] | None:
    """A name or a list of names, lower-cased; None when it is neither (validation reports it)."""
    if isinstance(value, str):
        value = [value]
    if isinstance(value, list) and all(isinstance(name, str) for name in value):
        return [name.strip().lower() for name in value]
    return None


def _only_aws(step: Pass, res: dict[Any, Any], origin: Path) -> None:
    if "aws" in (_names(res.get("exclude_providers", [])) or []):
        raise step.doc.error(
            origin, "an AMI exists only on aws, which resources.exclude_providers excludes"
        )
    if "providers" not in res:
        res["providers"] = ["aws"]
        step.out.renames[(*_RES, "providers")] = origin
        return
    allowed = _names(res["providers"])
    if allowed is None:
        return
    if "aws" not in allowed:
        raise step.doc.error(
            origin,
            f"an AMI exists only on aws, but the task allows only {', '.join(allowed)} "
            "(resources.providers): add aws or leave image_id out",
        )
    if len(set(allowed)) > 1:
        others = ", ".join(sorted(set(allowed) - {"aws"}))
        step.warn(origin, f"an AMI exists only on aws: the task runs on aws only (not {others})")
        res["providers"] = ["aws"]


def _only_regions(step: Pass, res: dict[Any, Any], regions: list[str], origin: Path) -> None:
    if "regions" not in res:
        res["regions"] = regions
        step.out.renames[(*_RES, "regions")] = origin
        return
    listed = _names(res["regions"])
    known = {region.lower() for region in regions}
    lacking = [region for region in listed or [] if region not in known]
    if lacking:
        raise step.doc.error(
            origin,
            f"has no AMI for {', '.join(lacking)} (resources.regions): add one for each "
            "region, or list only the regions it has",
        )
