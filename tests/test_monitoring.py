"""Monitoring declared by the stack (issue 38 item 1, docs/monitoring.md): the log-based metrics'
filters select exactly the lines the trainer really printed and the records recovery really wrote
(``tests/fixtures/recorded-run``), and every body the stack sends is valid against Google's own
schemas: the discovery documents bundled in google-api-python-client 2.202.0 (logging v2
``LogMetric``, monitoring v1 ``Dashboard``, monitoring v3 ``AlertPolicy`` and
``NotificationChannel``), converted by ``support.discovery``."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from support.discovery import schema_errors
from support.program import dev_config, refused, run_stack
from tpu_training_components.domain.monitoring import METRIC_TYPE_PREFIX, LogMetric, plan_monitoring

RECORDED = Path(__file__).parent / "fixtures" / "recorded-run"
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
        hourly_cost=1.25,
    )


def _matches(filter_text: str, entry: dict[str, Any]) -> bool:
    """The subset of the Logging query language the filters use: conditions joined by AND, each
    ``textPayload=~"RE2"``, ``jsonPayload.F="V"`` or ``jsonPayload.F>=N``. Anything else fails
    the test, so a filter cannot grow a clause this check silently ignores."""
    for condition in filter_text.split(" AND "):
        found = re.fullmatch(r'(\w+(?:\.\w+)*)(=~|=|>=)(".*"|[\d.]+)', condition)
        assert found, f"a condition this test does not understand: {condition!r}"
        path, operator, operand = found.groups()
        value: Any = entry
        for part in path.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if operator == "=~":
            if not (isinstance(value, str) and re.search(json.loads(operand), value)):
                return False
        elif operator == "=":
            if value != json.loads(operand):
                return False
        elif not (isinstance(value, (int, float)) and value >= float(operand)):
            return False
    return True


def _metric(plan, kind: str) -> LogMetric:
    return next(m for m in plan.metrics if m.name.endswith(f"/{kind}"))


@pytest.mark.parametrize(
    ("kind", "event"),
    [("steps", "step"), ("saves", "committed"), ("restores", "resume"), ("stops", "stopped")],
)
def test_each_trainer_metric_selects_exactly_its_events_lines(plan, kind, event):
    selected = [line for line in TRAINER_LINES if _matches(_metric(plan, kind).filter, {"textPayload": line})]
    expected = [line for line in TRAINER_LINES if line.split()[:2] == ["tpu-trainer:", event]]
    assert expected, f"the recorded run has no {event!r} line: the check would prove nothing"
    assert selected == expected


def test_saving_and_saved_lines_are_not_counted_as_commits(plan):
    # A save is committed only once its "committed" line is printed; "saving"/"saved" come first.
    saves = _metric(plan, "saves").filter
    assert not _matches(saves, {"textPayload": "tpu-trainer: saved step=15 seconds=0.0294"})
    assert not _matches(saves, {"textPayload": "tpu-trainer: saving step=15 reason=interval"})


def test_recovery_metrics_select_every_recovery_record_and_no_trainer_line(plan):
    for kind in ("recoveries", "recovery-seconds"):
        metric = _metric(plan, kind)
        assert all(_matches(metric.filter, {"jsonPayload": record}) for record in RECOVERY_RECORDS)
        assert not any(_matches(metric.filter, {"textPayload": line}) for line in TRAINER_LINES)
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
    assert "$1.25 per hour" in json.dumps(plan.dashboard)


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
