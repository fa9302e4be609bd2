"""`tpu-training preflight`: the real client libraries (google-auth, Service Usage, Resource
Manager, Cloud TPU, GKE) against loopback fakes of those APIs (support/fake_project_apis.py), and
the one list of APIs and permissions (domain/required_access.py) it checks, kept complete."""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from support.fakes.fake_project_apis import FakeProjectApis, service_account_file
from support.harness.program import run_plan, run_stack
from tpu_training_components.domain.required_access import (
    BOOTSTRAP_APIS,
    access_for,
    apis_for_features,
    stack_access,
)

from tpu_training import offline, project_files
from tpu_training.commands import preflight

ENDPOINT_VARIABLES = (
    "TPU_API_ENDPOINT",
    "GKE_API_ENDPOINT",
    "SERVICE_USAGE_API_ENDPOINT",
    "RESOURCE_MANAGER_API_ENDPOINT",
)
ZONE = "europe-west4-a"


@pytest.fixture(scope="module")
def dev_run() -> offline.ProgramRun:
    return offline.run_program(project_files.load_project(project_files.REPO_ROOT), "dev")


@pytest.fixture
def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeProjectApis]:
    """A project where the dev stack can be deployed: every API on, every permission held, the
    VM's type and version offered, a channel with a flex-start version."""
    with FakeProjectApis() as fake:
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(service_account_file(fake, tmp_path)))
        for variable in ENDPOINT_VARIABLES:
            monkeypatch.setenv(variable, fake.endpoint)
        fake.enabled_apis = set(stack_access([]).apis) | {
            "compute.googleapis.com",
            "container.googleapis.com",
            "iam.googleapis.com",
            # On in every new project (Cloud Logging and Monitoring): the stack enables them anyway.
            "logging.googleapis.com",
            "monitoring.googleapis.com",
            "storage.googleapis.com",
            "tpu.googleapis.com",
        }
        fake.accelerator_types[ZONE] = ["v2-8", "v3-8"]
        fake.runtime_versions[ZONE] = ["tpu-ubuntu2204-base", "tpu-vm-tf-2.16.1-pjrt"]
        fake.channels["us-east5"] = {
            "REGULAR": ["1.33.5-gke.1000000", "1.32.9-gke.100"],
            "RAPID": ["1.35.0-gke.1"],
        }
        yield fake


def checks_of(dev_run: offline.ProgramRun, seconds: float = 30.0) -> dict[str, preflight.Check]:
    checks = preflight.Preflight(
        preflight.declared(dev_run, "tpu-training-dev"), preflight.Budget(seconds)
    ).run()
    return {check.name: check for check in checks}


def test_a_ready_project_passes_every_check(api, dev_run):
    checks = checks_of(dev_run)
    assert {name: c.status for name, c in checks.items()} == {
        "credentials": "ok",
        "project": "ok",
        "apis": "ok",
        "permissions": "ok",
        "tpu-vm demo-tpu": "ok",
        "gke-versions": "ok",
    }
    assert checks["credentials"].detail == "service account deployer@tpu-training-dev.iam.gserviceaccount.com"
    assert checks["gke-versions"].detail == "the REGULAR channel in us-east5 offers 1.33.5-gke.1000000"
    # google-auth traded the key's signed assertion for a token at the file's token endpoint, and
    # every API call carried the credentials.
    assert api.calls[0] == "/token"
    assert all(headers.get("authorization", "").startswith("Bearer ") for headers in api.headers[1:])
    # One permission test with the whole list from required_access, for the project.
    (asked,) = [json.loads(body)["permissions"] for body in api.bodies if b"permissions" in body]
    assert asked == list(stack_access(r.type for r in dev_run.registrations).permissions)
    assert "tpu.nodes.create" in asked and "container.clusters.create" in asked
    assert preflight.exit_status(list(checks.values())) == preflight.EXIT_READY


def test_no_credentials_is_the_first_fix_and_nothing_else_is_asked(api, dev_run, tmp_path, monkeypatch):
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    checks = checks_of(dev_run)
    assert checks["credentials"].status == "missing"
    assert checks["credentials"].fix == ("gcloud auth application-default login",)
    assert {c.status for name, c in checks.items() if name != "credentials"} == {"unchecked"}
    assert api.calls == []
    assert preflight.exit_status(list(checks.values())) == preflight.EXIT_NOT_READY


def test_revoked_credentials_are_a_fix_too(api, dev_run):
    api.token_refused = True
    check = checks_of(dev_run)["credentials"]
    assert check.status == "missing" and "invalid_grant" in check.detail


def test_user_credentials_without_a_quota_project_get_the_command_that_sets_one(
    api, dev_run, tmp_path, monkeypatch
):
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(api.user_credentials_file(tmp_path)))
    api.granted = set()
    checks = checks_of(dev_run)
    assert checks["credentials"].status == "ok"
    assert (
        "gcloud auth application-default set-quota-project tpu-training-dev" in checks["credentials"].detail
    )
    # Who the user is, the credentials do not say: the fix asks gcloud.
    assert all(
        '--member=user:"$(gcloud config get-value account)"' in fix for fix in checks["permissions"].fix
    )


def test_a_disabled_api_gets_the_gcloud_command_unless_the_stack_enables_it(api, dev_run):
    api.enabled_apis -= {"tpu.googleapis.com", "serviceusage.googleapis.com"}
    check = checks_of(dev_run)["apis"]
    # The stack enables TPU itself (enableApis); Service Usage it cannot.
    assert check.status == "missing"
    assert check.missing == ("serviceusage.googleapis.com",)
    assert check.fix == ("gcloud services enable serviceusage.googleapis.com --project=tpu-training-dev",)
    assert "`pulumi up` enables tpu.googleapis.com" in check.detail


def test_without_enable_apis_every_disabled_api_is_a_fix(api, dev_run):
    api.enabled_apis -= {"tpu.googleapis.com"}
    stack = preflight.declared(dev_run, "tpu-training-dev")
    stack = preflight.Declared(**{**stack.__dict__, "enables_apis": False})
    (check,) = [c for c in preflight.Preflight(stack, preflight.Budget(30)).run() if c.name == "apis"]
    assert check.fix == ("gcloud services enable tpu.googleapis.com --project=tpu-training-dev",)


def test_missing_permissions_are_granted_by_role(api, dev_run):
    every = set(stack_access(r.type for r in dev_run.registrations).permissions)
    api.granted = every - {"tpu.nodes.create", "iam.serviceAccounts.actAs", "storage.buckets.create"}
    check = checks_of(dev_run)["permissions"]
    assert check.status == "missing"
    assert check.missing == ("iam.serviceAccounts.actAs", "storage.buckets.create", "tpu.nodes.create")
    grant = (
        "gcloud projects add-iam-policy-binding tpu-training-dev "
        "--member=serviceAccount:deployer@tpu-training-dev.iam.gserviceaccount.com"
    )
    assert [fix.split("   #")[0] for fix in check.fix] == [
        f"{grant} --role=roles/iam.serviceAccountUser",
        f"{grant} --role=roles/storage.admin",
        f"{grant} --role=roles/tpu.admin",
    ]


def test_a_zone_without_the_type_or_version_says_how_to_list_them(api, dev_run):
    api.accelerator_types[ZONE] = ["v2-8"]
    api.runtime_versions[ZONE] = ["tpu-ubuntu2204-base"]
    check = checks_of(dev_run)["tpu-vm demo-tpu"]
    assert check.status == "missing"
    assert check.detail == (
        "europe-west4-a offers no v3-8 to this project; europe-west4-a has no TPU software version "
        "'tpu-vm-tf-2.16.1-pjrt'"
    )
    assert check.fix == (
        "gcloud compute tpus accelerator-types list --zone=europe-west4-a --project=tpu-training-dev",
        "gcloud compute tpus tpu-vm versions list --zone=europe-west4-a --project=tpu-training-dev",
    )


def test_a_channel_without_a_flex_start_version_names_one_that_has(api, dev_run):
    api.channels["us-east5"] = {"REGULAR": ["1.32.9-gke.100"], "RAPID": ["1.34.1-gke.1"]}
    check = checks_of(dev_run)["gke-versions"]
    assert check.status == "missing"
    assert check.detail == (
        "the REGULAR channel in us-east5 offers no version for TPU flex-start (>= 1.33.0-gke.1712000); "
        "set cluster.releaseChannel to RAPID"
    )


def test_an_unknown_project_is_a_fix_and_stops_the_project_checks(api, dev_run):
    api.project = "someone-else"
    checks = checks_of(dev_run)
    assert checks["project"].status == "missing" and "403" in checks["project"].detail
    assert checks["project"].fix == ("gcloud projects describe tpu-training-dev", "gcloud projects list")
    assert checks["apis"].status == checks["permissions"].status == "unchecked"


def test_an_api_that_fails_leaves_its_check_unanswered_not_failed(api, dev_run):
    run = preflight.Preflight(preflight.declared(dev_run, "tpu-training-dev"), preflight.Budget(30))
    assert run.credentials().status == "ok"
    api.fail_with = 503
    check = run.apis()
    assert check.status == "unchecked" and "503" in check.detail
    assert preflight.exit_status([check]) == preflight.EXIT_UNCHECKED


def test_a_stalled_api_is_bounded_by_the_budget(api, dev_run, monkeypatch):
    monkeypatch.setattr(preflight, "CALL_SECONDS", 0.5)
    api.delay_seconds = 5
    started = time.monotonic()
    checks = preflight.Preflight(preflight.declared(dev_run, "tpu-training-dev"), preflight.Budget(30)).run()
    assert time.monotonic() - started < 3
    assert checks[0].status == "missing" and "took longer than 0.5 s" in checks[0].detail


def test_the_time_budget_leaves_later_checks_unchecked(api, dev_run):
    clock = iter([0.0, 0.0, 100.0, 100.0, 100.0, 100.0, 100.0, 100.0, 100.0])
    budget = preflight.Budget(10, clock=lambda: next(clock))
    checks = preflight.Preflight(preflight.declared(dev_run, "tpu-training-dev"), budget).run()
    assert checks[0].status == "ok"
    assert checks[1].status == "unchecked" and "time budget" in checks[1].detail


def test_the_command_prints_the_checklist_and_exits_1_with_fixes(api):
    api.enabled_apis.discard("serviceusage.googleapis.com")
    result = run_plan("--stack", "dev", command="preflight")
    assert result.returncode == preflight.EXIT_NOT_READY, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "Preflight for stack dev in project tpu-training-dev:"
    assert "  FIX apis: not enabled: serviceusage.googleapis.com" in lines
    assert (
        "        fix: gcloud services enable serviceusage.googleapis.com --project=tpu-training-dev" in lines
    )
    assert lines[-1] == "1 to fix before `pulumi up`"


def test_the_command_writes_json_and_exits_0_when_ready(api, capsys):
    assert preflight.main(["--stack", "dev", "--json", "-"]) == preflight.EXIT_READY
    document = json.loads(capsys.readouterr().out)
    assert document["exitStatus"] == 0 and document["project"] == "tpu-training-dev"
    assert [c["status"] for c in document["checks"]] == ["ok"] * 6


def test_bad_command_lines_and_stacks_exit_64_and_2(api, scratch_project, monkeypatch, capsys):
    assert preflight.main(["--stack", "a/b/c/d"]) == preflight.EXIT_USAGE
    with pytest.raises(SystemExit) as exited:
        preflight.main(["--timeout", "1"])
    assert exited.value.code == preflight.EXIT_USAGE
    assert "give between 5 and 600 seconds" in capsys.readouterr().err
    (scratch_project / "Pulumi.broken.yaml").write_text("config:\n  tpu-training:tpuVms: 5\n")
    monkeypatch.chdir(scratch_project)
    assert preflight.main(["--stack", "broken"]) == preflight.EXIT_CONFIG_ERROR
    assert "tpu-training:tpuVms" in capsys.readouterr().err
    assert api.calls == []  # nothing asked of a project for a stack that cannot be planned


# --- the one list -----------------------------------------------------------------------------


def _variants(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    queued = copy.deepcopy(config)
    queued["tpu-training:nodePools"][0]["provisioning"] = "flex-start-queued"
    queued["tpu-training:jobs"][0]["workload"] = "jobset"
    no_cluster = {
        k: v
        for k, v in config.items()
        if k not in ("tpu-training:cluster", "tpu-training:nodePools", "tpu-training:jobs")
    }
    own_network = dict(copy.deepcopy(config), **{"tpu-training:network": {"create": False}})
    return {"dev": config, "queued-jobset": queued, "no-cluster": no_cluster, "own-network": own_network}


def test_every_resource_type_the_stack_declares_has_its_access_listed(config):
    for name, variant in _variants(config).items():
        run = run_stack(variant)
        types = {r.type for r in run.registrations}
        assert [t for t in types if access_for(t) is None] == [], name
        needed = set(stack_access(types).apis) - set(BOOTSTRAP_APIS)
        (apis,) = [r for r in run.registrations if r.type == "tpu-training:project:ProjectApis"] or [None]
        enabled = {r.inputs["service"] for r in run.registrations if r.type == "gcp:projects/service:Service"}
        # What the stack enables is exactly what its resources need, beyond the bootstrap APIs.
        assert enabled == needed, name
        assert apis is not None


def test_the_stack_enables_its_apis_never_disabling_them_and_waits_for_them(config):
    run = run_stack(config)
    services = [r for r in run.registrations if r.type == "gcp:projects/service:Service"]
    assert sorted(r.name for r in services) == [
        "apis-compute",
        "apis-container",
        "apis-iam",
        "apis-logging",
        "apis-monitoring",
        "apis-storage",
        "apis-tpu",
    ]
    assert {r.inputs["disableOnDestroy"] for r in services} == {False}
    # (A dependency on a component is recorded as one on each of its resources.)
    service_urns = {r.urn for r in services}
    waiting = {r.name for r in run.registrations if service_urns <= set(r.options.get("dependsOn") or [])}
    assert waiting == {
        "checkpoints-europe-west4",
        "checkpoints-us-east5",
        "network",
        "trainer",
        "gke-trainer",
        "tpu-dev",
        "monitoring",
    }
    features = dict(tpu_vms=True, cluster=True, network=True, buckets=True, monitoring=True)
    assert apis_for_features(**features) == tuple(sorted(r.inputs["service"] for r in services))


def test_enable_apis_false_declares_no_service(config):
    run = run_stack(dict(config, **{"tpu-training:enableApis": False}))
    assert not [r for r in run.registrations if r.type.startswith("gcp:projects/service")]
