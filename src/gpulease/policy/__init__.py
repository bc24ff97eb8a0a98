"""Policy: which offers a task's data may go to.

``data_policy`` in a task names data classes. Each class restricts the providers, regions,
countries and certifications an offer must have; an offer is allowed when every named class allows
it. Built-in classes (:data:`BUILTIN_DATA_CLASSES`) cover the common cases; more are defined in the
gpulease config file under ``data_classes``.
"""

from __future__ import annotations

from gpulease.policy.data_classes import (
    BUILTIN_DATA_CLASSES,
    EU_EEA_COUNTRIES,
    DataClass,
    PolicyVerdict,
    evaluate_data_policy,
    load_data_classes,
    resolve_data_classes,
)

__all__ = [
    "BUILTIN_DATA_CLASSES",
    "EU_EEA_COUNTRIES",
    "DataClass",
    "PolicyVerdict",
    "evaluate_data_policy",
    "load_data_classes",
    "resolve_data_classes",
]
