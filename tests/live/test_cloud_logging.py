"""Recovery records sent to Cloud Logging (``live/cloud_logging.py``, docs/monitoring.md): the
``entries:write`` request as the Logging v2 discovery document defines it, sent to a loopback
fake that checks it; without credentials, or refused, one line says so and nothing else changes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.fakes.fake_cloud_logging import FakeCloudLogging
from support.harness.discovery import schema_errors
from tpu_training_components.domain.monitoring import RECOVERY_FORMAT
from tpu_training_components.live.cloud_logging import LOG_ID, RecordLog, write_request

RECORDED = Path(__file__).parents[1] / "fixtures" / "recorded-run" / "recovery.jsonl"
RECORDS = [json.loads(line) for line in RECORDED.read_text().splitlines()]


def test_the_request_is_a_valid_write_log_entries_request_whose_payloads_are_the_records():
    failed = dict(RECORDS[0], upStatus="failed")
    request = write_request("tpu-training-dev", [RECORDS[1], failed])
    assert schema_errors("logging", "v2", "WriteLogEntriesRequest", request) == []
    assert request["logName"] == f"projects/tpu-training-dev/logs/{LOG_ID}"
    assert [entry["jsonPayload"] for entry in request["entries"]] == [RECORDS[1], failed]
    assert [entry["severity"] for entry in request["entries"]] == ["NOTICE", "WARNING"]
    # What the stack's log-based metrics select on (domain/monitoring.py: recovery_filter).
    assert all(entry["jsonPayload"]["format"] == RECOVERY_FORMAT for entry in request["entries"])
    # A misspelt field is caught: the check can fail.
    assert schema_errors("logging", "v2", "WriteLogEntriesRequest", dict(request, logname="x"))


def test_the_records_reach_the_fake_as_entries_of_the_projects_recovery_log():
    said: list[str] = []
    with FakeCloudLogging() as logging_api:
        log = RecordLog(said.append, logging_api.endpoint)
        assert log.write("tpu-training-dev", RECORDS)
        assert log.write("tpu-training-dev", []) is False  # nothing to send: no call
    assert logging_api.calls == ["/v2/entries:write"]
    assert [entry["jsonPayload"] for entry in logging_api.entries] == RECORDS
    assert {entry["logName"] for entry in logging_api.entries} == {f"projects/tpu-training-dev/logs/{LOG_ID}"}
    assert said == []


def test_without_credentials_nothing_is_sent_and_it_is_said_once(monkeypatch):
    # conftest points GOOGLE_APPLICATION_CREDENTIALS at a file that does not exist.
    monkeypatch.delenv("LOGGING_API_ENDPOINT", raising=False)
    said: list[str] = []
    log = RecordLog(said.append)
    assert log.write("tpu-training-dev", RECORDS) is False
    assert log.write("tpu-training-dev", RECORDS) is False
    assert len(said) == 1 and "not sent to Cloud Logging" in said[0], said
    assert "no Application Default Credentials" in said[0]


@pytest.mark.parametrize("status", [403, 500])
def test_a_refused_write_is_one_warning_and_the_next_round_tries_again(status):
    said: list[str] = []
    with FakeCloudLogging() as logging_api:
        logging_api.fail_with = status
        log = RecordLog(said.append, logging_api.endpoint)
        assert log.write("tpu-training-dev", RECORDS) is False
        assert log.write("tpu-training-dev", RECORDS) is False
        logging_api.fail_with = None
        assert log.write("tpu-training-dev", RECORDS)
    assert len(logging_api.calls) == 3
    assert len(said) == 1, said
    assert said[0].startswith(f"warning: recovery records not sent to Cloud Logging: HTTP {status} ")
    assert len(logging_api.entries) == len(RECORDS)
