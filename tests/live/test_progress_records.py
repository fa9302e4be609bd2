"""live/progress_records.py against a loopback Cloud Storage (google-cloud-storage, the real
client): the progress records of a run's processes, what is wrong with the others, and a save
request written in the very format the reference trainer reads."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest
from support.fakes.loopback_gcs import LoopbackGcs
from support.harness.sandbox import trainer_modules
from tpu_training_components.live import endpoints
from tpu_training_components.live.progress_records import read_progress, write_save_request

BUCKET = "tpu-training-dev-dev-ckpt-us-east5"
RUN = f"gs://{BUCKET}/checkpoints/train-v6e"


def record(process: int, step: int) -> str:
    return json.dumps(
        {
            "format": "tpu-training-progress/1",
            "process": process,
            "processes": 2,
            "phase": "training",
            "step": step,
            "started_at": "2026-11-26T08:00:00.000Z",
            "advanced_at": "2026-11-26T08:59:00.000Z",
            "written_at": "2026-11-26T08:59:30.000Z",
        }
    )


@pytest.fixture
def gcs():
    with LoopbackGcs(BUCKET) as server:
        yield server, endpoints.storage_client("tpu-training-dev", server.endpoint)


def test_every_record_is_read_and_every_bad_one_named(gcs):
    _, client = gcs
    bucket = client.bucket(BUCKET)
    bucket.blob("checkpoints/train-v6e/progress.process-1.json").upload_from_string(record(1, 41))
    bucket.blob("checkpoints/train-v6e/progress.process-0.json").upload_from_string(record(0, 40))
    bucket.blob("checkpoints/train-v6e/progress.process-2.json").upload_from_string("garbage")
    # Another run's records, and a step folder: not listed.
    bucket.blob("checkpoints/train-v6e-2/progress.process-0.json").upload_from_string(record(0, 7))
    bucket.blob("checkpoints/train-v6e/40/commit_success.txt").upload_from_string(b"x")

    reading = read_progress(client, RUN, timeout=10)
    assert [(r.process, r.step) for r in reading.records] == [(0, 40), (1, 41)]
    assert reading.problems == [f"{RUN}/progress.process-2.json: not JSON"]


def test_a_run_that_published_nothing_has_no_records(gcs):
    _, client = gcs
    reading = read_progress(client, RUN, timeout=10)
    assert reading.records == [] and reading.problems == []


def test_a_save_request_is_written_as_the_trainer_reads_it(gcs):
    _, client = gcs
    before = datetime(2026, 11, 26, 12, 0, tzinfo=timezone.utc)
    url = write_save_request(
        client, RUN, "maintenance-node-a-1764158400", reason="maintenance", before=before, timeout=10
    )
    assert url == f"{RUN}/save-request.json"
    text = client.bucket(BUCKET).blob("checkpoints/train-v6e/save-request.json").download_as_text()

    with trainer_modules() as trainer:
        request, problem = trainer.save_requests.read_save_request(text, before.timestamp() - 60)
    assert problem is None
    assert request == trainer.save_requests.SaveRequest(
        "maintenance-node-a-1764158400", "maintenance", before.timestamp()
    )
