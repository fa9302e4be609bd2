"""What a stack watches in Cloud Monitoring, as plain data: log-based metrics over the trainer's
event lines and recovery's records, one dashboard, alert policies and e-mail channels.

Pure: the shapes returned here are the Cloud Logging v2 / Monitoring v1 and v3 REST shapes
(camelCase), so a test validates them against Google's discovery documents; the component in
``resources/monitoring.py`` hands them to pulumi-gcp.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Optional

TRAINER_PREFIX = "tpu-trainer:"
"""Every trainer event line starts so (``trainer/outcomes.py``: ``LOG_PREFIX``); the container
runtime or startup script hands the line to Cloud Logging as ``textPayload``."""
RECOVERY_FORMAT = "tpu-training-recovery/1"
"""The ``format`` field of every recovery record (``tpu_training/commands/recover.py``)."""
METRIC_TYPE_PREFIX = "logging.googleapis.com/user/"
"""Cloud Monitoring's type for a user-defined log-based metric is this prefix plus its name."""
EMAIL_PATTERN = re.compile(r"email:([^@\s]+@[^@\s]+\.[^@\s]+)")
NOTIFY_ALLOWED = "'email:ADDRESS', e.g. 'email:ops@example.com'"
# Recovery failing this long pages someone: one failed round may be a transient API error, half an
# hour of them is not.
RECOVERY_FAILING_SECONDS = 30 * 60
# Cloud Monitoring rejects a condition's alignment period beyond one day, so a longer restart
# window is watched over its last day.
LONGEST_ALIGNMENT_SECONDS = 24 * 60 * 60


@dataclass(frozen=True)
class LogMetric:
    """One log-based metric, in the Logging v2 ``LogMetric`` REST shape (``rest()``)."""

    name: str
    description: str
    filter: str
    labels: dict[str, str] = field(default_factory=dict)
    """Label name to its extractor, e.g. ``EXTRACT(jsonPayload.cause)``."""
    value_extractor: Optional[str] = None
    """Set for a distribution metric (the value each entry contributes); None counts entries."""

    @property
    def metric_type(self) -> str:
        return METRIC_TYPE_PREFIX + self.name

    def rest(self) -> dict[str, Any]:
        descriptor: dict[str, Any] = {
            "metricKind": "DELTA",
            "valueType": "DISTRIBUTION" if self.value_extractor else "INT64",
            "unit": "s" if self.value_extractor else "1",
            "labels": [{"key": key, "valueType": "STRING"} for key in self.labels],
        }
        body: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "filter": self.filter,
            "metricDescriptor": descriptor,
            "labelExtractors": dict(self.labels),
        }
        if self.value_extractor:
            body["valueExtractor"] = self.value_extractor
            # 1 s to about 9 h in doubling steps: a recovery takes from seconds to hours.
            body["bucketOptions"] = {
                "exponentialBuckets": {"numFiniteBuckets": 16, "growthFactor": 2, "scale": 1}
            }
        return body


CONTAINER_RESOURCE = "k8s_container"
"""The monitored resource of a GKE container's stdout and stderr entries; its labels name the
cluster, namespace, Pod and container (``cluster_name``, ``namespace_name``, ``pod_name``,
``container_name``). docs/monitoring.md lists the sources."""
TPU_VM_RESOURCE = "tpu_worker"
"""The monitored resource of a TPU VM worker's entries; ``node_id`` is the TPU node's name (see
docs/monitoring.md for what establishes this, and what does not)."""
# Selects no entry: every k8s_container entry names the cluster it came from.
NO_WORKLOAD = f'(resource.type="{CONTAINER_RESOURCE}" AND resource.labels.cluster_name="")'


def _one_of(values: tuple[str, ...]) -> str:
    """A Logging comparison's right side: one value, or a parenthesised OR of values (the
    Logging query language's ``field = ("a" OR "b")``)."""
    quoted = [f'"{value}"' for value in values]
    return quoted[0] if len(quoted) == 1 else "(" + " OR ".join(quoted) + ")"


@dataclass(frozen=True)
class TrainerScope:
    """Where this stack's trainers run, by the names Cloud Logging gives their entries' resource:
    a project may hold several stacks, each of whose trainers prints the same lines."""

    cluster: Optional[str] = None
    """The stack's GKE cluster (``resource.labels.cluster_name``)."""
    namespaces: tuple[str, ...] = ()
    """The namespaces of the stack's Jobs and JobSets (``resource.labels.namespace_name``)."""
    tpu_vms: tuple[str, ...] = ()
    """The stack's TPU VM node names (``resource.labels.node_id``)."""

    def condition(self) -> str:
        """Entries from this stack's workloads and no other; every alternative is parenthesised,
        so the query language's precedence of AND and OR cannot change what it means."""
        alternatives = []
        if self.cluster and self.namespaces:
            alternatives.append(
                f'(resource.type="{CONTAINER_RESOURCE}" AND resource.labels.cluster_name="{self.cluster}"'
                f" AND resource.labels.namespace_name={_one_of(tuple(sorted(set(self.namespaces))))})"
            )
        if self.tpu_vms:
            alternatives.append(
                f'(resource.type="{TPU_VM_RESOURCE}"'
                f" AND resource.labels.node_id={_one_of(tuple(sorted(set(self.tpu_vms))))})"
            )
        if not alternatives:
            return NO_WORKLOAD
        return alternatives[0] if len(alternatives) == 1 else "(" + " OR ".join(alternatives) + ")"


def trainer_event_filter(event: str, scope: TrainerScope) -> str:
    """Entries of one trainer event from this stack's workloads: the line's prefix, then the
    event word and a space. Not anchored: a TPU VM's startup-script log puts its own prefix before
    the trainer's line, a container's does not. No character here is special to RE2 or needs a
    backslash."""
    return f'textPayload=~"{TRAINER_PREFIX} {event} " AND {scope.condition()}'


def recovery_filter(stack: str, extra: str = "") -> str:
    """This stack's recovery records (a project may hold several stacks, each with its watcher)."""
    condition = f'jsonPayload.format="{RECOVERY_FORMAT}" AND jsonPayload.stack="{stack}"'
    return f"{condition} AND {extra}" if extra else condition


def notify_problem(entry: str) -> Optional[str]:
    if EMAIL_PATTERN.fullmatch(entry):
        return None
    return f"{entry!r} is not a notification target; allowed: {NOTIFY_ALLOWED}"


@dataclass(frozen=True)
class MonitoringPlan:
    """Everything one stack declares for monitoring, each in its REST shape."""

    metrics: tuple[LogMetric, ...]
    dashboard: dict[str, Any]
    alerts: tuple[dict[str, Any], ...]
    channels: tuple[dict[str, Any], ...]


def plan_monitoring(
    stack: str,
    notify: tuple[str, ...],
    restart_budget: int,
    restart_window_hours: float,
    checkpoint_interval_seconds: Optional[int],
    hourly_cost: Optional[str],
    scope: TrainerScope = TrainerScope(),
) -> MonitoringPlan:
    """The stack's metrics, dashboard, alerts and channels. ``checkpoint_interval_seconds`` is the
    longest interval any run uses (None: no run checkpoints, so no checkpoint-age alert);
    ``hourly_cost`` the plan's estimate as ``cost_estimate.summary`` words it; ``scope`` where the
    stack's trainers run (the trainer metrics count their lines only)."""
    prefix = f"tpu-training/{stack}"
    steps = LogMetric(
        f"{prefix}/steps",
        "Trainer step lines (goodput: steps that count).",
        trainer_event_filter("step", scope),
    )
    saves = LogMetric(
        f"{prefix}/saves", "Checkpoints committed by the trainer.", trainer_event_filter("committed", scope)
    )
    restores = LogMetric(
        f"{prefix}/restores",
        "Trainer starts from a checkpoint (resume lines).",
        trainer_event_filter("resume", scope),
    )
    stops = LogMetric(
        f"{prefix}/stops",
        "Trainer stops on SIGTERM or a preemption notice.",
        trainer_event_filter("stopped", scope),
    )
    recoveries = LogMetric(
        f"{prefix}/recoveries",
        "Recovery records, by cause and by how the update ended.",
        recovery_filter(stack),
        {
            "cause": "EXTRACT(jsonPayload.cause)",
            "status": "EXTRACT(jsonPayload.upStatus)",
            "run": "EXTRACT(jsonPayload.name)",
        },
    )
    recovery_seconds = LogMetric(
        f"{prefix}/recovery-seconds",
        "Time from detecting an interruption to the end of the update that answered it.",
        recovery_filter(stack, "jsonPayload.recoverySeconds>=0"),
        {"cause": "EXTRACT(jsonPayload.cause)"},
        value_extractor="EXTRACT(jsonPayload.recoverySeconds)",
    )
    metrics = (steps, saves, restores, stops, recoveries, recovery_seconds)
    window_seconds = min(int(restart_window_hours * 3600), LONGEST_ALIGNMENT_SECONDS)
    dashboard = _dashboard(
        stack, steps, saves, restores, stops, recoveries, recovery_seconds, restart_budget, hourly_cost
    )
    alerts = [
        # Counted as recovery counts restarts (domain/restart_budget.py): the Jobs and JobSets one
        # run's recovery re-created, summed over every series of that run (each round's entry
        # may come from another watcher process), not trainer resumes, which a new Pod or VM
        # would start as a series of its own.
        _threshold_alert(
            f"{stack}: restart budget spent",
            recoveries,
            window_seconds,
            "ALIGN_SUM",
            restart_budget - 1,
            0,
            'metric.label.status="succeeded"',
            group_by=("metric.label.run",),
        ),
        _threshold_alert(
            f"{stack}: a run hung",
            recoveries,
            300,
            "ALIGN_SUM",
            0,
            0,
            'metric.label.cause="hung"',
        ),
        _threshold_alert(
            f"{stack}: recovery failing for 30 min",
            recoveries,
            300,
            "ALIGN_SUM",
            0,
            RECOVERY_FAILING_SECONDS,
            'metric.label.status!="succeeded"',
        ),
    ]
    if checkpoint_interval_seconds is not None:
        alerts.append(
            _absent_alert(
                f"{stack}: no checkpoint committed in 2x the interval", saves, 2 * checkpoint_interval_seconds
            )
        )
    channels = tuple(
        {
            "type": "email",
            "displayName": f"{stack}: {entry}",
            "labels": {"email_address": entry.split(":", 1)[1]},
        }
        for entry in notify
    )
    return MonitoringPlan(metrics, dashboard, tuple(alerts), channels)


def _metric_filter(metric: LogMetric, extra: str = "") -> str:
    condition = f'metric.type="{metric.metric_type}"'
    return f"{condition} AND {extra}" if extra else condition


def _threshold_alert(
    name: str,
    metric: LogMetric,
    period: int,
    aligner: str,
    above: float,
    duration: int,
    extra: str = "",
    group_by: tuple[str, ...] = (),
) -> dict[str, Any]:
    aggregation: dict[str, Any] = {"alignmentPeriod": f"{period}s", "perSeriesAligner": aligner}
    if group_by:
        aggregation["crossSeriesReducer"] = "REDUCE_SUM"
        aggregation["groupByFields"] = list(group_by)
    return {
        "displayName": name,
        "combiner": "OR",
        "conditions": [
            {
                "displayName": name,
                "conditionThreshold": {
                    "filter": _metric_filter(metric, extra),
                    "aggregations": [aggregation],
                    "comparison": "COMPARISON_GT",
                    "thresholdValue": above,
                    "duration": f"{duration}s",
                },
            }
        ],
    }


def _absent_alert(name: str, metric: LogMetric, seconds: int) -> dict[str, Any]:
    return {
        "displayName": name,
        "combiner": "OR",
        "conditions": [
            {
                "displayName": name,
                "conditionAbsent": {
                    "filter": _metric_filter(metric),
                    "aggregations": [{"alignmentPeriod": "60s", "perSeriesAligner": "ALIGN_SUM"}],
                    # Cloud Monitoring's shortest absence duration is 2 minutes.
                    "duration": f"{max(seconds, 120)}s",
                },
            }
        ],
    }


def _chart(
    title: str,
    metric: LogMetric,
    aligner: str,
    group_by: tuple[str, ...] = (),
    threshold: Optional[float] = None,
) -> dict[str, Any]:
    aggregation: dict[str, Any] = {"alignmentPeriod": "60s", "perSeriesAligner": aligner}
    if group_by:
        aggregation["crossSeriesReducer"] = (
            "REDUCE_SUM" if aligner != "ALIGN_DELTA" else "REDUCE_PERCENTILE_50"
        )
        aggregation["groupByFields"] = list(group_by)
    chart: dict[str, Any] = {
        "dataSets": [
            {
                "timeSeriesQuery": {
                    "timeSeriesFilter": {"filter": _metric_filter(metric), "aggregation": aggregation}
                },
                "plotType": "LINE",
            }
        ]
    }
    if threshold is not None:
        chart["thresholds"] = [{"value": threshold, "label": "restart budget"}]
    return {"title": title, "xyChart": chart}


def _dashboard(
    stack: str,
    steps: LogMetric,
    saves: LogMetric,
    restores: LogMetric,
    stops: LogMetric,
    recoveries: LogMetric,
    recovery_seconds: LogMetric,
    restart_budget: int,
    hourly_cost: Optional[str],
) -> dict[str, Any]:
    cost = "not given to the dashboard; `tpu-training cost` prints it" if hourly_cost is None else hourly_cost
    widgets = [
        _chart("Goodput: trainer steps per minute", steps, "ALIGN_RATE"),
        _chart("Interruptions per cause", recoveries, "ALIGN_SUM", ("metric.label.cause",)),
        _chart("Time to resume per cause (s)", recovery_seconds, "ALIGN_DELTA", ("metric.label.cause",)),
        # A run's trainers are its Pods (GKE) or its TPU VM (whose entries carry node_id, not
        # pod_name): a series each. The gaps between a series' commits are its checkpoint's age;
        # the "no checkpoint committed" alert pages when one grows past twice the interval.
        _chart(
            "Checkpoints committed per run (Pod or TPU VM)",
            saves,
            "ALIGN_SUM",
            ("resource.label.pod_name", "resource.label.node_id"),
        ),
        _chart(
            "Restarts per run against the budget",
            recoveries,
            "ALIGN_SUM",
            ("metric.label.run",),
            threshold=float(restart_budget),
        ),
        _chart("Trainer stops", stops, "ALIGN_SUM"),
        {
            "title": "Hourly cost",
            "text": {"content": f"The plan's estimate for stack {stack}: {cost}.", "format": "MARKDOWN"},
        },
    ]
    tiles = [
        {"xPos": (i % 2) * 6, "yPos": (i // 2) * 4, "width": 6, "height": 4, "widget": w}
        for i, w in enumerate(widgets)
    ]
    return {"displayName": f"TPU training: {stack}", "mosaicLayout": {"columns": 12, "tiles": tiles}}
