"""``tpu-training:network``: the VPC the TPU VMs and the cluster use."""

from __future__ import annotations

from typing import Annotated, Optional

from pydantic import (
    AfterValidator,
    StrictBool,
    StrictStr,
)

from .fields import Model, dns_label


class NetworkConfig(Model):
    """``tpu-training:network``: the VPC the TPU VMs and the cluster use."""

    create: StrictBool = True
    name: Optional[Annotated[StrictStr, AfterValidator(dns_label("network name", 63))]] = None
    iap_ssh: StrictBool = True
