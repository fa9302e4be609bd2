"""Every fake is trusted only as far as the published schema that checks it (docs/fidelity.md).

Sources, all pinned:
- Google's discovery documents bundled in google-api-python-client 2.202.0
  (requirements-dev.txt): tpu v2 rev 20261001, container v1 rev 20261027, storage v1 rev 20261009,
  compute v1 rev 20261106, serviceusage v1 rev 20260921, cloudresourcemanager v3 rev 20261107,
  iam v1 rev 20261023 (``support.harness.discovery`` converts them to JSON Schema).
- The Kubernetes OpenAPI schemas of kubernetes-validate 1.37.0, at the version of
  ``support.harness.crds.KUBERNETES_VERSION``; JobSet v0.12.0's and Kueue v0.19.2's CRDs (tests/fixtures).
- The metadata server as Compute Engine documents it: "Monitor and plan for a host maintenance
  event" (https://cloud.google.com/compute/docs/instances/monitor-plan-host-maintenance-event),
  "Query the metadata server for maintenance event notices"
  (https://cloud.google.com/compute/docs/metadata/getting-live-migration-notice), "View and query
  VM metadata" (https://cloud.google.com/compute/docs/metadata/querying-metadata).

The Google fakes check every answer they give, in every test, as it is given
(``CheckedAgainstDiscovery``); the tests here drive each fake through what it serves and show
that a renamed field or an unknown enum value is caught. Kubernetes objects come from the
builders every other test uses.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from support.fakes import fake_kube_api as kube
from support.fakes.fake_kube_nodes import FakeNodeApi, gke_node
from support.fakes.fake_metadata import (
    EXAMPLE_NOTICE,
    MAINTENANCE_EVENT,
    UPCOMING,
    FakeMetadataServer,
    documented_values,
    published_errors,
)
from support.fakes.fake_project_apis import FakeProjectApis
from support.fakes.fake_tpu_api import FakeTpuApi
from support.harness.crds import (
    JOBSET_CRD,
    KUBERNETES_VERSION,
    KUEUE_CRDS,
    crd_validator,
    kubernetes_errors,
    schema_errors,
)
from support.harness.discovery import discovery_document, method
from support.harness.discovery import schema_errors as google_errors

DOCUMENTS = {
    ("tpu", "v2"): "20261001",
    ("container", "v1"): "20261027",
    ("storage", "v1"): "20261009",
    ("compute", "v1"): "20261106",
    ("serviceusage", "v1"): "20260921",
    ("cloudresourcemanager", "v3"): "20261107",
    ("iam", "v1"): "20261023",
}
ZONE = "europe-west4-a"
NOTICE = {
    "type": "SCHEDULED",
    "maintenanceStatus": "PENDING",
    "canReschedule": True,
    "windowStartTime": "2026-11-26T12:00:00Z",
    "windowEndTime": "2026-11-26T16:00:00Z",
    "latestWindowStartTime": "2026-11-28T12:00:00Z",
}


def get(url: str, **headers: str) -> tuple[int, Any]:
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


def test_the_discovery_documents_are_the_pinned_revisions():
    from importlib.metadata import version

    assert version("google-api-python-client") == "2.202.0"
    found = {key: discovery_document(*key)["revision"] for key in DOCUMENTS}
    assert found == DOCUMENTS


# --- the converter is strict where the API is -----------------------------------------------------


def node(**changes: Any) -> dict[str, Any]:
    return {
        "name": f"projects/p/locations/{ZONE}/nodes/demo-tpu",
        "state": "READY",
        "health": "HEALTHY",
        "createTime": "2026-11-20T08:00:00Z",
        "labels": {"recovery-generation": "3"},
        "upcomingMaintenance": NOTICE,
        **changes,
    }


def test_a_published_node_conforms_and_each_mutation_is_named():
    assert google_errors("tpu", "v2", "ListNodesResponse", {"nodes": [node()]}) == []
    cases = {
        # A renamed field, at the top and nested; an enum value the API does not have; a type.
        "nodes/0: Additional properties are not allowed ('upcomingMaintenence' was unexpected)": node(
            upcomingMaintenence=NOTICE
        ),
        "nodes/0/upcomingMaintenance: Additional properties are not allowed ('window_start_time'": node(
            upcomingMaintenance={"window_start_time": "2026-11-26T12:00:00Z"}
        ),
        "nodes/0/state: 'SUSPENDED' is not one of": node(state="SUSPENDED"),
        "nodes/0/upcomingMaintenance/canReschedule: 'false' is not of type 'boolean'": node(
            upcomingMaintenance={**NOTICE, "canReschedule": "false"}
        ),
        # google-datetime: RFC 3339 text with a zone.
        "nodes/0/createTime: '2026-11-20 08:00' does not match": node(createTime="2026-11-20 08:00"),
    }
    for expected, mutated in cases.items():
        del mutated["name"]  # (names are free text: nothing to catch)
        errors = google_errors("tpu", "v2", "ListNodesResponse", {"nodes": [mutated]})
        assert any(error.startswith(expected) for error in errors), (expected, errors)


def test_int64_is_a_string_of_digits_as_google_writes_it():
    assert google_errors("storage", "v1", "Object", {"name": "a", "size": "12"}) == []
    assert google_errors("storage", "v1", "Object", {"name": "a", "size": 12}) != []


def test_a_path_no_published_method_serves_is_found_out():
    assert method("tpu", "v2", "GET", "/v2/projects/p/locations/z/nodes")["id"] == (
        "tpu.projects.locations.nodes.list"
    )
    with pytest.raises(KeyError, match="no method GET /v2alpha1/projects/p/locations/z/nodes"):
        method("tpu", "v2", "GET", "/v2alpha1/projects/p/locations/z/nodes")


# --- the Google fakes -----------------------------------------------------------------------------


def test_the_tpu_fake_answers_as_v2_publishes_and_a_renamed_field_fails_it():
    with FakeTpuApi() as api:
        api.add(ZONE, "demo-tpu", "READY", health="HEALTHY", upcomingMaintenance=NOTICE)
        api.add(ZONE, "gone", "PREEMPTED", healthDescription="The TPU had a maintenance event at x")
        status, body = get(f"{api.endpoint}/v2/projects/p/locations/{ZONE}/nodes")
        assert status == 200 and len(body["nodes"]) == 2
        assert api.off_schema == []
    with pytest.raises(AssertionError, match="'upcomingMaintenence' was unexpected"):
        with FakeTpuApi() as api:
            api.add(ZONE, "demo-tpu", "READY", upcomingMaintenence=NOTICE)
            get(f"{api.endpoint}/v2/projects/p/locations/{ZONE}/nodes")
    with pytest.raises(AssertionError, match="maintenanceStatus: 'SOON' is not one of"):
        with FakeTpuApi() as api:
            api.add(ZONE, "demo-tpu", "READY", upcomingMaintenance={**NOTICE, "maintenanceStatus": "SOON"})
            get(f"{api.endpoint}/v2/projects/p/locations/{ZONE}/nodes")


def test_the_project_fakes_answer_as_their_apis_publish_and_take_what_the_project_sends(tmp_path: Path):
    from tpu_training.commands import preflight

    with FakeProjectApis() as api:
        api.enabled_apis = {"tpu.googleapis.com"}
        api.granted = {"tpu.nodes.list"}
        api.accelerator_types[ZONE] = ["v3-8"]
        api.runtime_versions[ZONE] = ["tpu-vm-tf-2.16.1-pjrt"]
        api.channels["us-east5"] = {"REGULAR": ["1.33.5-gke.100"]}
        base, project = api.endpoint, api.project
        for path in (
            f"/v3/projects/{project}",
            f"/v1/projects/{project}/services:batchGet?names=projects/{project}/services/tpu.googleapis.com",
            f"/v2/projects/{project}/locations/{ZONE}/acceleratorTypes",
            f"/v2/projects/{project}/locations/{ZONE}/runtimeVersions",
            f"/v1/projects/{project}/locations/us-east5/serverConfig",
        ):
            assert get(base + path)[0] == 200, path
        # What the project's preflight sends (testIamPermissions' body) is checked too.
        asked = json.dumps({"permissions": ["tpu.nodes.list", "tpu.nodes.create"]}).encode()
        request = urllib.request.Request(f"{base}/v3/projects/{project}:testIamPermissions", data=asked)
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert json.loads(answer.read()) == {"permissions": ["tpu.nodes.list"]}
        assert api.off_schema == []
        # A request body the API does not take: a misspelt field.
        bad = urllib.request.Request(
            f"{base}/v3/projects/{project}:testIamPermissions", data=b'{"permission": ["x"]}'
        )
        urllib.request.urlopen(bad, timeout=10).close()
        assert api.off_schema and "request: (top): Additional properties" in api.off_schema[0]
        api.allow_off_schema = True
    assert preflight  # the module whose calls these are (tests/commands/test_preflight.py drives it)


def test_the_gke_fake_answers_a_published_cluster(tmp_path: Path):
    with kube.FakeGkeApi() as api:
        api.add("projects/p/locations/us-east5/clusters/c", "https://127.0.0.1:1", b"ca")
        assert get(f"{api.endpoint}/v1/projects/p/locations/us-east5/clusters/c")[0] == 200
        assert api.off_schema == []


# --- the metadata server ----------------------------------------------------------------------


def metadata_errors(notice: Any) -> list[str]:
    return published_errors(UPCOMING, notice)


def test_the_metadata_fake_serves_what_compute_engine_documents():
    assert documented_values()[MAINTENANCE_EVENT] == {
        "NONE",
        "MIGRATE_ON_HOST_MAINTENANCE",
        "TERMINATE_ON_HOST_MAINTENANCE",
    }
    with FakeMetadataServer() as server:
        # Nothing scheduled: 503 with {"error": ...}, or {}.
        status, body = get(server.url + "?alt=json", **{"Metadata-Flavor": "Google"})
        assert status == 503 and set(body) == {"error"}
        server.none_status = 200
        assert get(server.url + "?alt=json", **{"Metadata-Flavor": "Google"}) == (200, {})
        server.upcoming = EXAMPLE_NOTICE
        status, body = get(server.url + "?alt=json", **{"Metadata-Flavor": "Google"})
        assert status == 200 and metadata_errors(body) == [] and server.off_schema == []
        # Without the header the server refuses.
        assert urllib_status(server.url) == 403
        for key, allowed in documented_values().items():
            request = urllib.request.Request(server.endpoint + key, headers={"Metadata-Flavor": "Google"})
            with urllib.request.urlopen(request, timeout=10) as answer:
                assert answer.read().decode() in allowed
                assert answer.headers["ETag"] and answer.headers["Metadata-Flavor"] == "Google"
    # A notice in the TPU API's spelling, served as the VM's: the fake fails the test.
    with pytest.raises(AssertionError, match="'windowStartTime' were unexpected"):
        with FakeMetadataServer() as server:
            server.upcoming = NOTICE
            get(server.url + "?alt=json", **{"Metadata-Flavor": "Google"})


def urllib_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return error.code


def test_a_notice_in_the_wrong_spelling_or_with_a_real_boolean_is_not_the_metadata_servers():
    assert metadata_errors(EXAMPLE_NOTICE) == []
    assert metadata_errors(NOTICE) != []  # the TPU API's camelCase: not what the VM's server writes
    assert any("'windowStartTime' was unexpected" in e for e in metadata_errors({"windowStartTime": "x"}))
    assert any("can_reschedule: False is not one of" in e for e in metadata_errors({"can_reschedule": False}))
    assert any("type: 'SOON' is not one of" in e for e in metadata_errors({"type": "SOON"}))


# --- Kubernetes -----------------------------------------------------------------------------------


def valid(item: dict[str, Any]) -> None:
    if item.get("kind") == "Status":
        # meta/v1's Status is served as apiVersion v1, and kubernetes-validate files its schema
        # under "meta" (status-meta-v1.json): checked with that file, as validate() checks.
        import jsonschema
        from referencing import Registry, Resource

        folder = (
            Path(kubernetes_validate.__file__).parent
            / "kubernetes-json-schema"
            / f"v{KUBERNETES_VERSION}-local-strict"
        )
        schema = json.loads((folder / "status-meta-v1.json").read_text())
        definitions = json.loads((folder / "_definitions.json").read_text())
        registry = Resource.from_contents(definitions) @ (Resource.from_contents(schema) @ Registry())
        jsonschema.Draft202012Validator(schema, registry=registry).validate(item)
        return
    kubernetes_validate.validate(item, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize(
    "item",
    [
        kube.job("train", conditions=(("Failed", "True", "BackoffLimitExceeded"),), failed=1),
        kube.queued_job("train"),
        kube.pod("train", "2026-11-21T10:00:00Z"),
        kube.watched_pod("train-0", disruption="PreemptionByScheduler"),
        kube.node("n-1", maintenance="1764151200"),
        gke_node("n-2", "v6e", taints=("cloud.google.com/impending-node-termination",)),
        kube._kubernetes_not_found()[1],  # noqa: SLF001 - the fake's own answers are what is checked
        kube._gone_status(),  # noqa: SLF001
    ],
    ids=["job", "queued-job", "pod", "watched-pod", "node", "gke-node", "404-status", "410-status"],
)
def test_each_kubernetes_object_the_fakes_serve_is_valid_kubernetes(item: dict[str, Any]):
    valid(item)


def test_the_kubernetes_fakes_lists_are_valid_kubernetes():
    with FakeNodeApi() as api:
        api.add("train", kube.job("train"))
        api.add_pod("train", kube.pod("train", "2026-11-21T10:00:00Z"))
        api.nodes.append(gke_node("n-1", "v6e"))
        for path in (
            "/apis/batch/v1/namespaces/train/jobs",
            "/api/v1/namespaces/train/pods",
            "/api/v1/nodes",
        ):
            status, body = get(api.endpoint + path)
            assert status == 200 and body["items"], path
            valid(body)


def test_a_renamed_kubernetes_field_is_caught():
    item = kube.job("train")
    item["status"]["startedTime"] = item["status"].pop("startTime")
    with pytest.raises(kubernetes_validate.ValidationError):
        valid(item)
    item = kube.job("train", conditions=(("Broken", "Maybe", "x"),))
    item["status"]["conditions"][0]["lastProbe"] = "2026-11-21T10:00:00Z"
    with pytest.raises(kubernetes_validate.ValidationError):
        valid(item)


def test_the_fakes_own_check_finds_what_kubernetes_validate_finds():
    """The fakes check every answer with support.harness.crds.kubernetes_errors, which builds each
    validator once from kubernetes-validate's files; it must say what the library's own validate()
    says, on objects that conform and on ones that do not."""
    renamed = kube.job("train")
    renamed["status"]["startedTime"] = renamed["status"].pop("startTime")
    wrong_type = kube.pod("train", "2026-11-21T10:00:00Z")
    wrong_type["status"]["containerStatuses"][0]["restartCount"] = "none"
    unknown_group = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    items = [kube.job("train"), kube.node("n-1", maintenance="1764151200"), renamed, wrong_type]
    for item in items:
        try:
            kubernetes_validate.validate(item, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as error:
            assert kubernetes_errors(item) == ["/".join(map(str, error.absolute_path)) + ": " + error.message]
        else:
            assert kubernetes_errors(item) == []
    with pytest.raises(kubernetes_validate.SchemaNotFoundError):
        kubernetes_validate.validate(unknown_group, KUBERNETES_VERSION, strict=True)
    assert kubernetes_errors(unknown_group) == ["(top): no published schema for example.com/v1 Widget"]
    assert kubernetes_errors(renamed) != [] and kubernetes_errors(wrong_type) != []


@pytest.mark.parametrize("state", sorted(kube.WORKLOAD_STATES))
@pytest.mark.parametrize("owner", ["job", "jobset"])
def test_each_kueue_workload_the_fake_serves_is_valid_for_kueues_crd(state: str, owner: str):
    made = kube.queued_job("train") if owner == "job" else kube.jobset("train")
    made["metadata"]["namespace"] = "train"
    item = kube.workload(made, state)
    assert schema_errors(item, KUEUE_CRDS / "kueue.x-k8s.io_workloads.yaml") == []


def test_each_jobset_the_fake_serves_is_valid_for_jobsets_crd():
    for item in (
        kube.jobset("train"),
        kube.jobset("train", conditions=(("Failed", "ReachedMaxRestarts"),), restarts=3, ready=1),
    ):
        assert schema_errors(item, JOBSET_CRD) == []
    renamed = kube.jobset("train")
    renamed["status"]["restartCount"] = renamed["status"].pop("restarts")
    assert any("restartCount" in error for error in schema_errors(renamed, JOBSET_CRD))
    workload = kube.workload(
        {**kube.queued_job("train"), "metadata": {"name": "t", "uid": "u", "namespace": "n"}}, "admitted"
    )
    workload["status"]["admission"]["clusterQueue"] = 7
    assert schema_errors(workload, KUEUE_CRDS / "kueue.x-k8s.io_workloads.yaml") != []
    assert crd_validator  # (the validator every CRD check here goes through: support.harness.crds)


# --- Cloud Storage ---------------------------------------------------------------------------------


def test_the_storage_emulator_answers_objects_as_storage_v1_publishes():
    """The trainer's clients upload, read and list objects (tensorstore, gcsfs); the emulator's
    answers to each are storage v1's ``Object`` and ``Objects``, and a renamed field is caught."""
    from support.fakes.loopback_gcs import LoopbackGcs

    with LoopbackGcs("bucket") as gcs:
        upload = urllib.request.Request(
            f"{gcs.endpoint}/upload/storage/v1/b/bucket/o?uploadType=media&name=run/1/a.txt",
            data=b"hello",
            method="POST",
            headers={"Content-Type": "text/plain"},
        )
        with urllib.request.urlopen(upload, timeout=10) as answer:
            uploaded = json.loads(answer.read())
        _, read = get(f"{gcs.endpoint}/storage/v1/b/bucket/o/run%2F1%2Fa.txt")
        _, listed = get(f"{gcs.endpoint}/storage/v1/b/bucket/o?prefix=run/")
    assert google_errors("storage", "v1", "Object", uploaded) == []
    assert google_errors("storage", "v1", "Object", read) == [] and read["size"] == "5"
    assert google_errors("storage", "v1", "Objects", listed) == [] and len(listed["items"]) == 1
    read["generations"] = read.pop("generation")
    assert any("'generations' was unexpected" in e for e in google_errors("storage", "v1", "Object", read))
