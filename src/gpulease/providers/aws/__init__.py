"""The AWS EC2 provider (needs the ``gpulease[aws]`` extra: boto3, imported lazily).

Modules: :mod:`.provider` (:class:`AwsProvider`, the Provider contract), :mod:`.settings`
(the ``providers.aws`` config section), :mod:`.errors` (error codes → typed errors, retries),
:mod:`.clients` (boto3 clients per region, the persisted region set), :mod:`.access` (key pair
and security group per owner and region), :mod:`.ami` (AMI per accelerator family),
:mod:`.userdata` (first-boot script, node tokens), :mod:`.mapping` (EC2 → Instance),
:mod:`.events` (events derived by polling), :mod:`.tunnel` (SSH tunnels to agents).
"""

from gpulease.providers.aws.provider import AwsProvider
from gpulease.providers.aws.settings import AwsSettings

__all__ = ["AwsProvider", "AwsSettings"]
