"""gpulease: what to rent, where, and what it will cost — then rent it and run on it.

The SDK surface is kept small and lazy (importing ``gpulease`` loads nothing heavy)::

    import gpulease
    task = gpulease.load_task("examples/finetune-7b.yaml")
    plans = gpulease.plan(task)
    catalog = gpulease.Catalog.load()
    answer = gpulease.estimate(task, gpus="H800:8", nodes=256)   # hardware you name
    result = gpulease.tco(gpus="A100-80GB:8", months=36, hours_per_month=500)  # rent vs buy
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    "Catalog",
    "Plan",
    "PlanResult",
    "Task",
    "__version__",
    "estimate",
    "load_task",
    "plan",
    "plan_all",
    "tco",
]

if TYPE_CHECKING:
    # at run time `gpulease.estimate` is the estimate package, which is callable as this
    from gpulease.catalog import Catalog
    from gpulease.cost.tco import tco
    from gpulease.estimate.hardware import estimate_hardware as estimate
    from gpulease.optimizer import Plan, PlanResult, plan, plan_all
    from gpulease.spec import Task, load_task

_LAZY = {
    "Catalog": "gpulease.catalog",
    "estimate": "gpulease.estimate",  # the package itself, which is callable
    "Plan": "gpulease.optimizer",
    "PlanResult": "gpulease.optimizer",
    "plan": "gpulease.optimizer",
    "plan_all": "gpulease.optimizer",
    "Task": "gpulease.spec",
    "load_task": "gpulease.spec",
    "tco": "gpulease.cost.tco",  # rent against buy, in process
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'gpulease' has no attribute {name!r}")
    import importlib

    loaded = importlib.import_module(module)
    return loaded if module == f"{__name__}.{name}" else getattr(loaded, name)
