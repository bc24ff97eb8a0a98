"""gpulease.spec: the task a user asks for — models, YAML in and out, JSON Schema, SkyPilot import.

Modules (private unless re-exported here):

- ``models``        Task / Resources / AcceleratorRequest / Candidate / … (the contract)
- ``workload``      Workload / ModelSpec (re-exported by ``models``)
- ``service``       the ``service:`` section (ServiceSpec and its parts)
- ``serve_fields``  field types of services and pools: seconds, ports, counts
- ``pool``          the ``pool:`` section of a pool file (PoolSpec)
- ``base``          the configuration every model shares
- ``quantities``    field types of ``7B``, ``36h``, ``$500``, ``32+``: read, written, described
- ``fields``        field types of names, ``use_spot``, envs and free-form config
- ``accelerators``  canonical accelerator names, aliases, the three accelerator forms
- ``yaml_lines``    YAML ↔ data with the line of every key
- ``secret_vars``   the ``secrets:`` field: names and SecretStr values, dumped as names only
- ``normalize``     alternative spellings and SkyPilot task YAML → gpulease field names
- ``candidates``    SkyPilot's any_of / ordered lists folded into one request (and candidates)
- ``skypilot_serve`` SkyPilot's ``service:`` (SkyServe) and ``pool:`` fields → gpulease's
- ``diagnostics``   validation errors → one SpecError naming field and line
- ``loader``        load / parse / dump entry points, SpecWarning
- ``schema``        JSON Schema of the user-facing format

The package imports only :mod:`gpulease.units`, :mod:`gpulease.errors`, :mod:`gpulease.wire`
(the node variables), pydantic, PyYAML and the standard library.
"""

from gpulease.spec.accelerators import KNOWN_ACCELERATORS, canonical_accelerator_name
from gpulease.spec.loader import (
    SpecWarning,
    dump_task,
    load_task,
    load_task_with_warnings,
    parse_task,
    parse_task_with_warnings,
    task_from_dict,
    task_from_dict_with_warnings,
    with_providers,
)
from gpulease.spec.models import (
    AcceleratorRequest,
    CheckpointSpec,
    JobRecovery,
    ModelSpec,
    PoolSpec,
    Resources,
    Task,
    Workload,
)
from gpulease.spec.schema import task_json_schema
from gpulease.spec.service import (
    AutoscaleSpec,
    ReadinessProbe,
    ReplicaRange,
    ScaleRule,
    ServiceSpec,
    ServiceSpot,
)

__all__ = [
    "KNOWN_ACCELERATORS",
    "AcceleratorRequest",
    "AutoscaleSpec",
    "CheckpointSpec",
    "JobRecovery",
    "ModelSpec",
    "PoolSpec",
    "ReadinessProbe",
    "ReplicaRange",
    "Resources",
    "ScaleRule",
    "ServiceSpec",
    "ServiceSpot",
    "SpecWarning",
    "Task",
    "Workload",
    "canonical_accelerator_name",
    "dump_task",
    "load_task",
    "load_task_with_warnings",
    "parse_task",
    "parse_task_with_warnings",
    "task_from_dict",
    "task_from_dict_with_warnings",
    "task_json_schema",
    "with_providers",
]
