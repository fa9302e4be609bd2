"""Cloud Monitoring for a training stack: log-based metrics, one dashboard, alert policies and
e-mail notification channels, all planned by ``domain/monitoring.py``."""

import json
import re
from typing import Any, Optional

import pulumi
import pulumi_gcp as gcp
from pydantic import with_config
from typing_extensions import NotRequired, TypedDict

from ..domain.monitoring import MonitoringPlan, TrainerScope, notify_problem, plan_monitoring
from ..validation import ARGUMENTS, Problems, check_arguments, count_problem

# Map-valued fields: their keys are data (label names), not field names, and stay as written.
_MAPS = frozenset({"labelExtractors", "labels"})


def pulumi_shape(value: Any) -> Any:
    """A REST body (camelCase) as pulumi-gcp inputs (snake_case, the Terraform field names)."""
    if isinstance(value, list):
        return [pulumi_shape(item) for item in value]
    if isinstance(value, dict):
        return {
            re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower(): (
                dict(item) if key in _MAPS and isinstance(item, dict) else pulumi_shape(item)
            )
            for key, item in value.items()
        }
    return value


@with_config(ARGUMENTS)
class StackMonitoringArgs(TypedDict):
    stack: str
    """The stack's name: it prefixes every metric, alert and the dashboard's title."""
    restart_budget: int
    """Restarts a workload may make within ``restart_window_hours`` (``recovery.restartBudget``)."""
    restart_window_hours: float
    """The restart budget's window, in hours."""
    notify: NotRequired[list[str]]
    """Who alerts reach, each ``email:ADDRESS`` (default: nobody; alerts still show in the console)."""
    checkpoint_interval_seconds: NotRequired[int]
    """The longest checkpoint interval of any run; without it there is no checkpoint-age alert."""
    hourly_cost: NotRequired[str]
    """The plan's hourly cost estimate as ``cost_estimate.summary`` words it, shown on the
    dashboard (the stack program passes what it declares, priced as ``tpu-training cost``)."""
    cluster: NotRequired[str]
    """The stack's GKE cluster: trainer metrics count the lines of its containers..."""
    namespaces: NotRequired[list[str]]
    """...in these namespaces (those of the stack's Jobs and JobSets)."""
    tpu_vms: NotRequired[list[str]]
    """The stack's TPU VM node names: trainer metrics count their lines too. Without a cluster or
    a VM the trainer metrics count nothing."""
    project: NotRequired[pulumi.Input[str]]
    """Google Cloud project; the provider's project when omitted."""


def _check_values(problems: Problems, args: StackMonitoringArgs) -> None:
    for index, entry in enumerate(args.get("notify", [])):
        problems.check(f"notify[{index}]", notify_problem(entry))
    problems.check("restart_budget", count_problem(args["restart_budget"], least=1))
    if "checkpoint_interval_seconds" in args:
        problems.check(
            "checkpoint_interval_seconds", count_problem(args["checkpoint_interval_seconds"], least=1)
        )


class StackMonitoring(pulumi.ComponentResource):
    """Log-based metrics, a dashboard, alert policies and notification channels for one stack.

    Children: ``{name}-metric-{kind}`` (``gcp.logging.Metric``), ``{name}-dashboard``
    (``gcp.monitoring.Dashboard``), ``{name}-notify-{address}`` (``gcp.monitoring.NotificationChannel``),
    ``{name}-alert-{what it watches}`` (``gcp.monitoring.AlertPolicy``). Named by what they are,
    not by position, so adding or removing one leaves the others' URNs alone.
    """

    dashboard_id: pulumi.Output[str]
    """The dashboard's resource name."""
    metric_types: pulumi.Output[list[str]]
    """Cloud Monitoring types of the log-based metrics."""

    def __init__(
        self, name: str, args: StackMonitoringArgs, opts: Optional[pulumi.ResourceOptions] = None
    ) -> None:
        problems = check_arguments("StackMonitoring", name, args, StackMonitoringArgs, opts)
        _check_values(problems, args)
        problems.raise_any()
        super().__init__("tpu-training:monitoring:StackMonitoring", name, {}, opts)

        self.plan: MonitoringPlan = plan_monitoring(
            args["stack"],
            tuple(args.get("notify", [])),
            args["restart_budget"],
            args["restart_window_hours"],
            args.get("checkpoint_interval_seconds"),
            args.get("hourly_cost"),
            TrainerScope(
                args.get("cluster"), tuple(args.get("namespaces", [])), tuple(args.get("tpu_vms", []))
            ),
        )
        project = args.get("project")
        child = pulumi.ResourceOptions(parent=self)
        metrics = []
        for metric in self.plan.metrics:
            body = pulumi_shape(metric.rest())
            kind = metric.name.rsplit("/", 1)[1]
            metrics.append(gcp.logging.Metric(f"{name}-metric-{kind}", project=project, **body, opts=child))
        # Charts and alerts name the metrics by type; they must exist first.
        after_metrics = pulumi.ResourceOptions(parent=self, depends_on=metrics)
        dashboard = gcp.monitoring.Dashboard(
            f"{name}-dashboard",
            dashboard_json=json.dumps(self.plan.dashboard, sort_keys=True),
            project=project,
            opts=after_metrics,
        )
        channels = [
            gcp.monitoring.NotificationChannel(
                f"{name}-notify-{_slug(channel['labels']['email_address'])}",
                project=project,
                **pulumi_shape(channel),
                opts=child,
            )
            for channel in self.plan.channels
        ]
        for alert in self.plan.alerts:
            watches = alert["displayName"].split(": ", 1)[-1]
            gcp.monitoring.AlertPolicy(
                f"{name}-alert-{_slug(watches)}",
                project=project,
                notification_channels=[channel.name for channel in channels],
                **pulumi_shape(alert),
                opts=after_metrics,
            )
        self.dashboard_id = dashboard.id
        self.metric_types = pulumi.Output.from_input([metric.metric_type for metric in self.plan.metrics])
        self.register_outputs({"dashboard_id": self.dashboard_id, "metric_types": self.metric_types})


def _slug(text: str) -> str:
    """``ops@example.com`` -> ``ops-example-com``: a resource-name part."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
