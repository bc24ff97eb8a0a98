"""The Slurm provider: one sbatch allocation per launch, one agent per node (started by srun).

Modules: :mod:`.provider` (:class:`SlurmProvider`, the Provider contract), :mod:`.settings`
(the ``providers.slurm`` config section), :mod:`.commands` (running sbatch/squeue/scancel/sinfo
with timeouts, errors classified, retries), :mod:`.script` (the sbatch argv and the scripts),
:mod:`.mapping` (job states → instance states). Offers from sinfo: gpulease.catalog.runtime. See
``docs/slurm.md``.
"""

from gpulease.providers.slurm.provider import SlurmProvider
from gpulease.providers.slurm.settings import SlurmSettings

__all__ = ["SlurmProvider", "SlurmSettings"]
