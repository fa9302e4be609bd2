"""``tpu-training:monitoring``: the dashboard, log-based metrics and alerts the stack declares."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, StrictBool, StrictStr
from tpu_training_components.domain.monitoring import notify_problem

from .fields import Model, no_problem


class MonitoringConfig(Model):
    """``tpu-training:monitoring``: Cloud Monitoring for the stack (docs/monitoring.md)."""

    # On by default: an operator should see goodput and be told when recovery gives up without
    # having to ask for it; the resources cost nothing until logs flow.
    enabled: StrictBool = True
    notify: tuple[Annotated[StrictStr, AfterValidator(no_problem(notify_problem))], ...] = ()
