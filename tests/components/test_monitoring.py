"""Monitoring declared by the stack (issue 38 item 1, docs/monitoring.md): the log-based metrics'
filters select exactly the lines the trainer really printed and the records recovery really wrote
(``tests/fixtures/recorded-run``), and every body the stack sends is valid against Google's own
schemas: the discovery documents bundled in google-api-python-client 2.202.0 (logging v2
``LogMetric``, monitoring v1 ``Dashboard``, monitoring v3 ``AlertPolicy`` and
``NotificationChannel``), converted by ``support.harness.discovery``.

Trainer metrics count this stack's workloads only. The entries' resource fields used below:
- GKE containers: ``resource.type="k8s_container"`` with ``resource.labels.cluster_name`` and
  ``namespace_name`` (Google's "About GKE logs",
  https://cloud.google.com/stackdriver/docs/solutions/gke/managing-logs: the GKE logging agent
  reads container stdout/stderr and adds the Kubernetes metadata; k8s_container's labels
  cluster_name, pod_name, container_name as Google's Apigee hybrid "Cluster monitoring
  guidelines" list them, https://cloud.google.com/apigee/docs/hybrid/v1.10/cluster-monitoring-guidelines).
- TPU VMs: ``resource.type="tpu_worker"`` with ``resource.labels.node_id`` (the TPU's name) and
  ``zone``: Google's "Monitor TPUs" (https://docs.cloud.google.com/tpu/docs/monitor-tpu) names
  the TPU Worker resource; the log labels were found only in Google's own test code
  (GoogleCloudPlatform/ml-auto-solutions, dags/.../validation_util.py
  ``validate_tpu_vm_log_exist``), not on a docs page: docs/monitoring.md says so.
- ``field = ("a" OR "b")``: Google's "Logging query language"
  (https://cloud.google.com/logging/docs/view/logging-query-language)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from support.harness.discovery import schema_errors
from support.harness.program import dev_config, refused, run_stack
from tpu_training_components.domain import cost_estimate
from tpu_training_components.domain.monitoring import (
    METRIC_TYPE_PREFIX,
    LogMetric,
    TrainerScope,
    plan_monitoring,
)

from tpu_training.commands import cost

RECORDED = Path(__file__).parents[1] / "fixtures" / "recorded-run"
# The trainer's lines as a container runtime hands them to Cloud Logging: the text after the
# runtime's timestamp becomes the entry's textPayload.
TRAINER_LINES = [line.split(" ", 1)[1] for line in (RECORDED / "trainer.log").read_text().splitlines()]
RECOVERY_RECORDS = [json.loads(line) for line in (RECORDED / "recovery.jsonl").read_text().splitlines()]

MONITORING_TYPES = (
    "gcp:logging/metric:Metric",
    "gcp:monitoring/dashboard:Dashboard",
    "gcp:monitoring/alertPolicy:AlertPolicy",
    "gcp:monitoring/notificationChannel:NotificationChannel",
)


@pytest.fixture(scope="module")
def plan():
    return plan_monitoring(
        "dev",
        ("email:ops@example.com",),
        restart_budget=5,
        restart_window_hours=6.0,
        checkpoint_interval_seconds=600,
        hourly_cost="always on: $1.25 per hour",
        scope=SCOPE,
    )


SCOPE = TrainerScope(cluster="tpu-dev", namespaces=("default", "research"), tpu_vms=("demo-tpu",))
# Where the recorded lines come from, as Cloud Logging records the resource (sources above).
HERE = [
    {"type": "k8s_container", "labels": {"cluster_name": "tpu-dev", "namespace_name": "default"}},
    {"type": "k8s_container", "labels": {"cluster_name": "tpu-dev", "namespace_name": "research"}},
    {"type": "tpu_worker", "labels": {"node_id": "demo-tpu", "zone": "europe-west4-a", "worker_id": "0"}},
]
# Another stack in the same project: its cluster, a namespace of ours not its, its TPU VM.
ELSEWHERE = [
    {"type": "k8s_container", "labels": {"cluster_name": "tpu-prod", "namespace_name": "default"}},
    {"type": "k8s_container", "labels": {"cluster_name": "tpu-dev", "namespace_name": "kube-system"}},
    {"type": "tpu_worker", "labels": {"node_id": "prod-tpu", "zone": "europe-west4-a", "worker_id": "0"}},
    # A Compute Engine VM whose label happened to match is not a TPU worker.
    {"type": "gce_instance", "labels": {"node_id": "demo-tpu"}},
]
_TOKEN = re.compile(
    r"\s*(?:(?P<open>\()|(?P<close>\))|(?P<op>AND|OR)\b|"
    r"(?P<cmp>(?P<path>\w+(?:\.\w+)*)(?P<operator>=~|=|>=)"
    r'(?P<operand>\("[^"]*"(?: OR "[^"]*")*\)|"[^"]*"|[\d.]+)))'
)


def _matches(filter_text: str, entry: dict[str, Any]) -> bool:
    """The subset of the Logging query language the filters use: comparisons
    ``textPayload=~"RE2"``, ``F="V"``, ``F=("V" OR "W")`` or ``F>=N``, joined by AND or by OR
    within parentheses; AND and OR side by side without parentheses fail the test (their
    precedence would decide). Anything else fails the test too, so a filter cannot grow a clause
    this check silently ignores."""
    tokens = []
    position = 0
    while position < len(filter_text):
        found = _TOKEN.match(filter_text, position)
        assert found and found.end() > position, (
            f"a condition this test does not understand: {filter_text[position:]!r}"
        )
        tokens.append(found)
        position = found.end()

    def compare(token: re.Match[str]) -> bool:
        value: Any = entry
        for part in token["path"].split("."):
            value = value.get(part) if isinstance(value, dict) else None
        operand = token["operand"]
        if token["operator"] == "=~":
            return isinstance(value, str) and bool(re.search(json.loads(operand), value))
        if token["operator"] == "=":
            wanted = (
                [json.loads(v) for v in re.findall(r'"[^"]*"', operand)]
                if operand.startswith("(")
                else [json.loads(operand)]
            )
            return value in wanted
        return isinstance(value, (int, float)) and value >= float(operand)

    def group(at: int) -> tuple[bool, int]:
        results, joins = [], set()
        while True:
            token = tokens[at]
            if token["open"]:
                result, at = group(at + 1)
                assert tokens[at]["close"], "unbalanced parentheses"
            else:
                assert token["cmp"], f"expected a comparison at {token[0]!r}"
                result = compare(token)
            results.append(result)
            at += 1
            if at == len(tokens) or tokens[at]["close"]:
                break
            joins.add(tokens[at]["op"])
            at += 1
        assert len(joins) <= 1, f"AND and OR side by side without parentheses: {filter_text!r}"
        return (any(results) if joins == {"OR"} else all(results)), at

    result, end = group(0)
    assert end == len(tokens), f"unbalanced parentheses: {filter_text!r}"
    return result


def _metric(plan, kind: str) -> LogMetric:
    return next(m for m in plan.metrics if m.name.endswith(f"/{kind}"))


@pytest.mark.parametrize(
    ("kind", "event"),
    [("steps", "step"), ("saves", "committed"), ("restores", "resume"), ("stops", "stopped")],
)
def test_each_trainer_metric_selects_exactly_its_events_lines(plan, kind, event):
    expected = [line for line in TRAINER_LINES if line.split()[:2] == ["tpu-trainer:", event]]
    assert expected, f"the recorded run has no {event!r} line: the check would prove nothing"
    for resource in HERE:
        selected = [
            line
            for line in TRAINER_LINES
            if _matches(_metric(plan, kind).filter, {"textPayload": line, "resource": resource})
        ]
        assert selected == expected, resource


@pytest.mark.parametrize("kind", ["steps", "saves", "restores", "stops"])
def test_trainer_metrics_count_no_line_of_another_stacks_workloads(plan, kind):
    # Two stacks in one project print the same lines: each counts its own cluster's and VMs'.
    for resource in ELSEWHERE:
        assert not any(
            _matches(_metric(plan, kind).filter, {"textPayload": line, "resource": resource})
            for line in TRAINER_LINES
        ), resource


def test_a_stack_without_workloads_counts_no_trainer_line():
    alone = plan_monitoring("solo", (), 5, 6.0, None, None, TrainerScope())
    for resource in HERE + ELSEWHERE:
        assert not any(
            _matches(_metric(alone, "steps").filter, {"textPayload": line, "resource": resource})
            for line in TRAINER_LINES
        )


def test_saving_and_saved_lines_are_not_counted_as_commits(plan):
    # A save is committed only once its "committed" line is printed; "saving"/"saved" come first.
    saves = _metric(plan, "saves").filter
    for line in ("tpu-trainer: saved step=15 seconds=0.0294", "tpu-trainer: saving step=15 reason=interval"):
        assert not _matches(saves, {"textPayload": line, "resource": HERE[0]})


def test_recovery_metrics_select_every_recovery_record_and_no_trainer_line(plan):
    for kind in ("recoveries", "recovery-seconds"):
        metric = _metric(plan, kind)
        assert all(_matches(metric.filter, {"jsonPayload": record}) for record in RECOVERY_RECORDS)
        assert not any(
            _matches(metric.filter, {"textPayload": line, "resource": HERE[0]}) for line in TRAINER_LINES
        )
        # Another stack's watcher in the same project writes records too: not this stack's.
        other = [dict(record, stack="prod") for record in RECOVERY_RECORDS]
        assert not any(_matches(metric.filter, {"jsonPayload": record}) for record in other)
    # The label extractors read fields every record has, with the causes the records use.
    extracted = {
        re.fullmatch(r"EXTRACT\(jsonPayload\.(\w+)\)", e)[1]
        for e in _metric(plan, "recoveries").labels.values()
    }
    assert all(extracted <= set(record) for record in RECOVERY_RECORDS)


def test_every_metric_is_a_valid_logging_v2_log_metric(plan):
    for metric in plan.metrics:
        assert schema_errors("logging", "v2", "LogMetric", metric.rest()) == [], metric.name
        assert metric.metric_type == METRIC_TYPE_PREFIX + metric.name
        # Logging's rule for metric names: up to 100 characters of [A-Za-z0-9_-./], no leading '/'.
        assert re.fullmatch(r"[A-Za-z0-9_.\-][A-Za-z0-9_.\-/]{0,99}", metric.name), metric.name


def test_the_dashboard_is_a_valid_monitoring_v1_dashboard(plan):
    assert schema_errors("monitoring", "v1", "Dashboard", plan.dashboard) == []
    titles = [tile["widget"]["title"] for tile in plan.dashboard["mosaicLayout"]["tiles"]]
    for wanted in (
        "Goodput",
        "Interruptions per cause",
        "Time to resume per cause",
        "Checkpoints committed per run",
        "Restarts per run against the budget",
        "Hourly cost",
    ):
        assert any(title.startswith(wanted) for title in titles), wanted
    assert "always on: $1.25 per hour" in json.dumps(plan.dashboard)
    # A series per trainer: GKE's entries name their Pod, a TPU VM's its node (SCOPE, above).
    (checkpoints,) = [
        tile["widget"]
        for tile in plan.dashboard["mosaicLayout"]["tiles"]
        if "committed" in tile["widget"]["title"]
    ]
    aggregation = checkpoints["xyChart"]["dataSets"][0]["timeSeriesQuery"]["timeSeriesFilter"]["aggregation"]
    assert aggregation["groupByFields"] == ["resource.label.pod_name", "resource.label.node_id"]


def test_alerts_and_channels_are_valid_monitoring_v3_bodies(plan):
    names = [alert["displayName"] for alert in plan.alerts]
    assert names == [
        "dev: restart budget spent",
        "dev: a run hung",
        "dev: recovery failing for 30 min",
        "dev: no checkpoint committed in 2x the interval",
    ]
    for alert in plan.alerts:
        assert schema_errors("monitoring", "v3", "AlertPolicy", alert) == [], alert["displayName"]
    assert plan.channels == (
        {
            "type": "email",
            "displayName": "dev: email:ops@example.com",
            "labels": {"email_address": "ops@example.com"},
        },
    )
    assert schema_errors("monitoring", "v3", "NotificationChannel", plan.channels[0]) == []


def test_every_filter_names_a_declared_metric_and_every_period_is_a_duration(plan):
    declared = {metric.metric_type for metric in plan.metrics}
    text = json.dumps([plan.dashboard, plan.alerts])
    named = set(re.findall(r'metric\.type=\\"([^\\]+)\\"', text))
    assert named and named <= declared
    for key in ("alignmentPeriod", "duration"):
        for value in re.findall(rf'"{key}": "([^"]*)"', text):
            assert re.fullmatch(r"\d+s", value), (key, value)
            if key == "alignmentPeriod":
                assert int(value[:-1]) >= 60, value  # Monitoring's shortest alignment period


def test_thresholds_follow_the_stack_config(plan):
    by_name = {alert["displayName"]: alert["conditions"][0] for alert in plan.alerts}
    budget = by_name["dev: restart budget spent"]["conditionThreshold"]
    assert (budget["thresholdValue"], budget["aggregations"][0]["alignmentPeriod"]) == (
        4,
        "21600s",
    )  # > 4: the 5th restart
    # Recoveries that re-created a run, summed over all of that run's series: one series per
    # run, whichever watcher wrote each entry.
    assert budget["filter"].endswith('AND metric.label.status="succeeded"')
    assert "/recoveries" in budget["filter"]
    assert budget["aggregations"][0]["crossSeriesReducer"] == "REDUCE_SUM"
    assert budget["aggregations"][0]["groupByFields"] == ["metric.label.run"]
    assert (
        by_name["dev: no checkpoint committed in 2x the interval"]["conditionAbsent"]["duration"] == "1200s"
    )
    assert by_name["dev: recovery failing for 30 min"]["conditionThreshold"]["duration"] == "1800s"
    longer = plan_monitoring("dev", (), 5, 30 * 24.0, None, None)
    # No run checkpoints: no checkpoint alert; a month-long window is watched over its last day.
    assert len(longer.alerts) == 3
    assert (
        longer.alerts[0]["conditions"][0]["conditionThreshold"]["aggregations"][0]["alignmentPeriod"]
        == "86400s"
    )


@pytest.mark.parametrize(
    ("schema", "body", "misspelled"),
    [
        ("LogMetric", lambda p: p.metrics[0].rest(), "valueExtracter"),
        ("Dashboard", lambda p: p.dashboard, "mosaicLayuot"),
        ("AlertPolicy", lambda p: p.alerts[0], "combinr"),
    ],
)
def test_the_schema_check_catches_a_misspelled_field(plan, schema, body, misspelled):
    api, version = {
        "LogMetric": ("logging", "v2"),
        "Dashboard": ("monitoring", "v1"),
        "AlertPolicy": ("monitoring", "v3"),
    }[schema]
    mutated = {**body(plan), misspelled: "x"}
    errors = schema_errors(api, version, schema, mutated)
    assert errors and misspelled in errors[0]
    nested = json.loads(json.dumps(plan.alerts[0]))
    nested["conditions"][0]["conditionThreshold"]["aggregations"][0]["perSeriesAlinger"] = "ALIGN_SUM"
    assert schema_errors("monitoring", "v3", "AlertPolicy", nested)


def _camel(value: Any, keep: bool = False) -> Any:
    if isinstance(value, list):
        return [_camel(item) for item in value]
    if isinstance(value, dict):
        return {
            (key if keep else re.sub(r"_(\w)", lambda m: m[1].upper(), key)): _camel(
                item, keep=key in ("labelExtractors", "label_extractors", "labels")
            )
            for key, item in value.items()
        }
    return value


@pytest.fixture(scope="module")
def dev_run():
    return run_stack(dev_config())


def test_the_dev_plan_sends_what_the_schemas_accept(dev_run):
    # The Pulumi inputs (Terraform field names) mapped back to REST names: the provider sends these.
    metrics = dev_run.by_type("gcp:logging/metric:Metric")
    alerts = dev_run.by_type("gcp:monitoring/alertPolicy:AlertPolicy")
    dashboards = dev_run.by_type("gcp:monitoring/dashboard:Dashboard")
    assert (len(metrics), len(alerts), len(dashboards)) == (6, 4, 1)
    for metric in metrics:
        body = {k: v for k, v in _camel(metric.inputs).items() if k != "project"}
        assert schema_errors("logging", "v2", "LogMetric", body) == [], metric.name
    for alert in alerts:
        body = {k: v for k, v in _camel(alert.inputs).items() if k != "project"}
        assert schema_errors("monitoring", "v3", "AlertPolicy", body) == [], alert.name
    assert (
        schema_errors("monitoring", "v1", "Dashboard", json.loads(dashboards[0].inputs["dashboardJson"]))
        == []
    )


def test_monitoring_disabled_declares_none_of_it(config):
    config["tpu-training:monitoring"] = {"enabled": False}
    run = run_stack(config)
    assert not [
        r
        for r in run.registrations
        if r.type in MONITORING_TYPES or r.type.startswith("tpu-training:monitoring")
    ]


def test_notify_becomes_email_channels_that_every_alert_reaches(config):
    config["tpu-training:monitoring"] = {"notify": ["email:ops@example.com", "email:oncall@example.org"]}
    run = run_stack(config)
    channels = run.by_type("gcp:monitoring/notificationChannel:NotificationChannel")
    assert sorted(c.inputs["labels"]["email_address"] for c in channels) == [
        "oncall@example.org",
        "ops@example.com",
    ]
    project = config["gcp:project"]
    names = sorted(f"projects/{project}/notificationChannels/{c.name}" for c in channels)
    for alert in run.by_type("gcp:monitoring/alertPolicy:AlertPolicy"):
        assert sorted(alert.inputs["notificationChannels"]) == names


@pytest.mark.parametrize("entry", ["ops@example.com", "slack:#ops", "email:", "email:ops"])
def test_a_notify_entry_that_is_not_an_email_target_is_refused_by_key_value_and_allowed_form(config, entry):
    config["tpu-training:monitoring"] = {"notify": [entry]}
    message = refused(config)
    assert (
        "tpu-training:monitoring.notify" in message and repr(entry) in message and "email:ADDRESS" in message
    )


# --- The dashboard's hourly cost is the plan's ------------------------------------------------


def _cost_tile(run) -> str:
    dashboard = json.loads(
        run.one("gcp:monitoring/dashboard:Dashboard", "monitoring-dashboard").inputs["dashboardJson"]
    )
    return next(
        tile["widget"]["text"]["content"]
        for tile in dashboard["mosaicLayout"]["tiles"]
        if tile["widget"]["title"] == "Hourly cost"
    )


def _gke_only(config):
    """The dev stack without its TPU VM: a cluster, a spot pool of two slices and its Job."""
    config.pop("tpu-training:tpuVms")
    config["tpu-training:nodePools"][0].update(provisioning="spot", slices=2)
    return config


def _ladders(config):
    """Both capacity ladders: the VM over two zones and two capacities, the pool spot then
    flex-start (tests/domain/test_capacity_ladder.py, tests/components/test_compute_class.py)."""
    vm = config["tpu-training:tpuVms"][0]
    vm.pop("zone")
    vm.update(zones=["us-central1-a", "us-central1-b"], provisioning=["spot", "on-demand"])
    config["tpu-training:nodePools"][0]["provisioning"] = ["spot", "flex-start"]
    return config


@pytest.mark.parametrize("edit", [lambda c: c, _gke_only, _ladders], ids=["dev", "gke-only", "ladders"])
def test_the_dashboard_shows_what_infra_cost_prices_the_plan_at(config, edit):
    run = run_stack(edit(config))
    found = cost.estimate(run)  # what `tpu-training cost` prints, from the plan's registrations
    assert found.lines, "nothing priced: the comparison would prove nothing"
    assert _cost_tile(run) == f"The plan's estimate for stack dev: {cost_estimate.summary(found)}."
    for when, title in cost_estimate.PARTS:
        known, unknown = found.total(when)
        shown = re.search(rf"{re.escape(title)}: (at least )?\$([\d.]+)", _cost_tile(run))
        assert shown and float(shown[2]) == pytest.approx(known, abs=0.01 if known >= 0.1 else 0.0001)
        assert bool(shown[1]) == bool(unknown)


def test_the_ladder_stack_counts_each_ladders_dearest_rung(config):
    found = cost.estimate(run_stack(_ladders(config)))
    assert [line for line in found.lines if line.ladder], "no ladder priced: the test proves nothing"
    assert "of each ladder only its dearest rung" in cost_estimate.summary(found)


def test_an_unknown_price_is_shown_as_unknown_never_as_zero(config, monkeypatch):
    from tpu_training_components.domain import prices

    monkeypatch.setattr(prices, "tpu_vm_hour", lambda *args: prices.unknown("not in the table"))
    tile = _cost_tile(run_stack(config))
    # The NAT's share stays known; the TPU VM and the TPU pool are named as unknown.
    unknown = r"while training, on top: at least \$[\d.]+ per hour \(2 unknown: demo-tpu-vm, v6e-4x4-pool\)"
    assert re.search(unknown, tile), tile


def test_a_price_change_changes_the_dashboard_and_nothing_else(config, monkeypatch):
    from tpu_training_components.domain import prices

    before = run_stack(config)
    original = prices.tpu_vm_hour
    monkeypatch.setattr(prices, "tpu_vm_hour", lambda *args: original(*args).times(2))
    after = run_stack(config)
    assert _cost_tile(before) != _cost_tile(after)
    changed = [r.name for r in after.registrations if r.inputs != before.one(r.type, r.name).inputs]
    assert changed == ["monitoring-dashboard"]
