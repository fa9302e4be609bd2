"""Issue 9's bad inputs, one regression test each: refused before any resource is declared, with a
message that names the key, shows the value and says what is allowed; or, where the input is
valid, run as the user meant. Each rule's source is beside it in the library."""

from __future__ import annotations

import json

import pytest
from support.harness.in_process import run_plan
from support.harness.program import refused, run_stack
from tpu_training_components.domain import naming

VMS = "tpu-training:tpuVms"
JOBS = "tpu-training:jobs"
POOLS = "tpu-training:nodePools"


def _vms_only(config):
    for key in ("tpu-training:cluster", POOLS, JOBS):
        config.pop(key)
    return config


# --- 5. Everything validated before any resource: derived names, gcp:project ----------------


@pytest.mark.parametrize("stack", ["dev_eu", "dev-", "Dev", "a.b", "dev..eu", "_"])
def test_valid_pulumi_stack_names_make_valid_resource_names(config, stack):
    # Valid Pulumi stack names all: the derived names are made valid, not refused.
    run = run_stack(config, stack=stack)
    accounts = [r.inputs["accountId"] for r in run.by_type("gcp:serviceaccount/account:Account")]
    buckets = [r.inputs["name"] for r in run.by_type("gcp:storage/bucket:Bucket")]
    assert len(accounts) == 3 and len(buckets) == 2
    assert not [a for a in accounts if naming.service_account_id_problem(a)]
    assert not [b for b in buckets if naming.bucket_name_problem(b)]


@pytest.mark.parametrize(
    ("stack", "account", "bucket", "network"),
    [
        ("dev", "tpu-train-dev", "tpu-training-dev-dev-ckpt-europe-west4", "tpu-training-dev"),
        # Not DNS-safe as it is: made so, with a hash of the name, in every name alike.
        (
            "Prod",
            "tpu-train-prod-5f56359e",
            "tpu-training-dev-prod-5f56359e-ckpt-europe-west4",
            "tpu-training-prod-5f56359e",
        ),
        (
            "dev_eu",
            "tpu-train-dev-eu-8347a337",
            "tpu-training-dev-dev-eu-8347a337-ckpt-europe-west4",
            "tpu-training-dev-eu-8347a337",
        ),
    ],
)
def test_names_are_made_from_the_dns_safe_stack_name(config, stack, account, bucket, network):
    run = run_stack(config, stack=stack)
    assert account in [r.inputs["accountId"] for r in run.by_type("gcp:serviceaccount/account:Account")]
    assert bucket in [r.inputs["name"] for r in run.by_type("gcp:storage/bucket:Bucket")]
    assert run.one("gcp:compute/network:Network", "network-vpc").inputs["name"] == network


def test_stacks_that_differ_in_punctuation_get_names_of_their_own(config):
    def names(stack):
        run = run_stack(config, stack=stack)
        return {r.inputs["name"] for r in run.by_type("gcp:storage/bucket:Bucket")}

    assert names("dev-eu").isdisjoint(names("dev_eu"))


@pytest.mark.parametrize(
    ("project", "reason"),
    [
        ("12345678", "is a project number; give the project ID"),
        ("ab", "must be 6 to 30 lowercase letters"),
        ("my-project-", "not ending with '-'"),
        ("1project", "starting with a letter"),
        ("a" * 31, "must be 6 to 30"),
        ("My-Project", "lowercase"),
        ("google-thing", "contains 'google'"),
        ("example.com:my-project", "domain-scoped project ID"),
    ],
)
def test_gcp_project_is_validated_itself(config, project, reason):
    config["gcp:project"] = project
    message = refused(config)
    assert f'gcp:project = "{project}"' in message and reason in message
    assert "bucket name" not in message  # not blamed on what is made from it


# --- 6. Accepted before, refused now, naming the key ------------------------------------------


def test_more_than_64_labels_on_a_resource(config):
    # + 3 of ours + the recovery generation and cause + pulumi-gcp's goog-pulumi-provisioned
    # (REFERENCE.md).
    config["tpu-training:labels"] = {f"k{i}": "v" for i in range(59)}
    message = refused(config)
    assert "tpu-training:labels has 59 labels" in message and "limit of 64" in message
    assert "goog-pulumi-provisioned" in message and "remove 1" in message
    config["tpu-training:labels"] = {f"k{i}": "v" for i in range(58)}
    previous = {"lastRecoveries": {"tpuVms": {"demo-tpu": {"action": "replace", "cause": "preempted"}}}}
    vm = run_stack(config, previous_outputs=previous).one("gcp:tpu/v2Vm:V2Vm", "demo-tpu-vm")
    assert len(vm.inputs["labels"]) == 63  # with its cause; and the provider's own makes 64


def test_the_recovery_generation_label_is_the_stacks_own(config):
    config["tpu-training:labels"] = {"recovery-generation": "7"}
    assert "tpu-training:labels.recovery-generation: label key" in refused(config)


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("192.168.1.1", "is an IP address"),
        ("g00gle-ckpt", "look-alike of it"),
        ("googlebucket", "begins with 'goog'"),
        ("my.bucket.name", "has a dot"),
        ("a..b", "has a dot"),
    ],
)
def test_bucket_names_cloud_storage_refuses(config, name, reason):
    _vms_only(config)
    config["tpu-training:bucket"] = {"name": name}
    message = refused(config)
    assert f'tpu-training:bucket.name = "{name}"' in message and reason in message


def test_a_dotted_stack_name_makes_no_dotted_bucket(config):
    buckets = run_stack(_vms_only(config), stack="dev.eu").by_type("gcp:storage/bucket:Bucket")
    assert "." not in buckets[0].inputs["name"]


def test_nodes_beyond_gkes_cluster_limit(config):
    # One pool beyond the limit is refused by its own plan (as the Python API refuses it) ...
    config[POOLS][0].update(machineType="ct5p-hightpu-4t", topology="16x16x24", slices=10)
    config[POOLS][0]["nodeLocations"] = ["us-east5-a"]
    message = refused(config)
    assert "tpu-training:nodePools[0] (v6e-4x4): slices 10 of 1536 VM(s) each" in message
    assert "limit of 15000 nodes per cluster; at most 9 slices" in message
    # ... and pools within it one by one, beyond it together, by the cluster's count.
    config[POOLS][0]["slices"] = 5
    config[POOLS].append(dict(config[POOLS][0], name="v5p-more"))
    config[JOBS] = []
    message = refused(config)
    assert "tpu-training:nodePools: the pools reach 15363 nodes" in message
    assert "limit of 15000 nodes per cluster" in message


def test_a_slice_beyond_the_generations_largest(config):
    config[POOLS][0].update(machineType="ct5p-hightpu-4t", topology="16x16x25")
    assert "tpu-training:nodePools[0] (v6e-4x4): topology '16x16x25' is not offered" in refused(config)


@pytest.mark.parametrize("provisioning", ["flex-start", "spot"])
def test_durations_beyond_protobufs_range(config, provisioning):
    config[POOLS][0].update(maxRunDuration="315576000001s", provisioning=provisioning)
    message = refused(config)
    assert 'tpu-training:nodePools[0].maxRunDuration = "315576000001s"' in message
    assert "longer than the longest duration the API takes (315576000000s)" in message


@pytest.mark.parametrize("namespace", ["kube-system", "kube-public", "kube-node-lease"])
def test_kubernetes_system_namespaces(config, namespace):
    config[JOBS][0]["namespace"] = namespace
    message = refused(config)
    assert f'tpu-training:jobs[0].namespace = "{namespace}"' in message and "reserves" in message


def test_other_kube_prefixed_namespaces_are_only_discouraged(config):
    config[JOBS][0]["namespace"] = "kube-flow"
    run_stack(config)


def test_namespace_rule_in_words(config):
    config[JOBS][0]["namespace"] = "Bad_NS"
    assert "must be 1-63 lowercase letters, digits or '-'" in refused(config)


@pytest.mark.parametrize(
    ("image", "reason"),
    [
        ("us-docker.pkg.dev/Proj/Repo/img:1", "uppercase letters in its path"),
        ("img with space", "contains whitespace"),
        (" img", "contains whitespace"),
        ("img:tag:tag", "is not an image reference"),
        ("MyOrg/trainer:v1", "which is no registry host"),
        ("trainer:v\u00e9", "is not an image reference"),
        ("", "blank"),
    ],
)
def test_container_images_a_node_cannot_pull(config, image, reason):
    config[JOBS][0]["image"] = image
    message = refused(config)
    assert (
        f"tpu-training:jobs[0].image = {json.dumps(image, ensure_ascii=False)}" in message
        and reason in message
    )


def test_a_blank_train_command_would_mark_training_done_untrained(config):
    config[VMS][0]["trainCommand"] = "   "
    assert 'tpu-training:tpuVms[0].trainCommand = "   ": the training command is blank' in refused(config)


def test_a_job_command_without_a_program(config):
    config[JOBS][0]["command"] = [""]
    assert "tpu-training:jobs[0].command" in refused(config)


@pytest.mark.parametrize(
    ("where", "name"),
    [(VMS, "PATH"), (VMS, "CHECKPOINT_DIR"), (JOBS, "PATH"), (VMS, "TPU_TRAINING_STATE_DIR"), (VMS, "IFS")],
)
def test_env_that_the_script_needs_or_the_stack_sets(config, where, name):
    config[where][0]["env"] = {name: "/x"}
    message = refused(config)
    assert f"{where}[0].env.{name}: environment variable {name} cannot be set in env" in message


def test_an_env_override_the_stack_allows_is_real_in_the_script_and_the_outputs(config):
    config[VMS][0]["env"] = {"TRAIN_STEPS": "7"}
    run = run_stack(config)
    script = run.one("gcp:tpu/v2Vm:V2Vm", "demo-tpu-vm").inputs["metadata"]["startup-script"]
    assert "\n  TRAIN_STEPS=7\n" in script  # in RUN_ENVIRONMENT, given to the trainer as it is
    assert run.outputs["trainingEnvironments"]["demo-tpu"]["TRAIN_STEPS"] == "7"


@pytest.mark.parametrize(
    ("section", "key", "value"),
    [
        ("training", "baseLearningRate", float("nan")),
        ("training", "baseLearningRate", float("inf")),
        ("recovery", "maintenanceGraceMinutes", 10_000_000_000_000),
    ],
)
def test_numbers_out_of_range(config, section, key, value):
    config[f"tpu-training:{section}"] = {**(config.get(f"tpu-training:{section}") or {}), key: value}
    assert f"tpu-training:{section}.{key}" in refused(config)


def test_total_examples_past_2_to_the_53_in_integer_arithmetic(config):
    config["tpu-training:training"]["totalExamples"] = 2**53 + 1
    environment = run_stack(config).outputs["trainingEnvironments"]["demo-tpu"]
    assert environment["TRAIN_STEPS"] == str(-(-(2**53 + 1) // 1024))  # v3-8: 8 cores x 128


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        ("tpu-training:tpuVm", "unknown key (did you mean 'tpuVms'?)"),
        ("tpu-trainig:jobs", "unknown namespace 'tpu-trainig' (did you mean 'tpu-training:jobs'?)"),
        ("gcp:projcet", "the gcp provider has no such key (did you mean 'project'?)"),
    ],
)
def test_unknown_keys_with_a_suggestion(config, key, reason):
    config[key] = "[]"
    assert f"{key}: {reason}" in refused(config)


def test_known_gcp_provider_keys_pass(config):
    config["gcp:zone"] = "us-east5-a"
    config["gcp:region"] = "us-east5"
    run_stack(config)


@pytest.mark.parametrize(
    ("zone", "reason"),
    [
        (
            "europe-west99-a",
            "not a Google Cloud zone in our table of 2026-09-21; did you mean 'europe-west9-a'?",
        ),
        (
            "us-central1-z",
            "us-central1's zones are us-central1-a, us-central1-b, us-central1-c, us-central1-f",
        ),
    ],
)
def test_zones_that_do_not_exist(config, zone, reason):
    config[VMS][0]["zone"] = zone
    message = refused(config)
    assert f'tpu-training:tpuVms[0].zone = "{zone}"' in message and reason in message


def test_regions_that_do_not_exist(config):
    config["tpu-training:cluster"]["location"] = "us-nowhere1"
    assert 'tpu-training:cluster.location = "us-nowhere1": region' in refused(config)


def test_a_zone_without_the_accelerator_is_a_warning(config):
    config[VMS][0]["zone"] = "europe-west1-b"
    assert any("tpuVms[0].zone: zone europe-west1-b is not listed" in w for w in run_stack(config).warnings)


# --- 7. Messages a person can act on ----------------------------------------------------------


def test_messages_name_the_one_label_at_fault_not_the_whole_map(config):
    config["tpu-training:labels"] = {**{f"k{i}": "v" for i in range(30)}, "Team": "x"}
    message = refused(config)
    assert "tpu-training:labels.Team: label key 'Team' must be a lowercase letter" in message
    assert "k29" not in message


def test_numbers_where_text_goes_say_to_quote_them(config):
    config[VMS][0]["env"] = {"RETRIES": 5}
    assert 'tpu-training:tpuVms[0].env.RETRIES = 5: must be text; write it in quotes ("5")' in (
        refused(config)
    )


def test_null_is_shown_as_null(config):
    config[VMS][0]["zone"] = None
    assert "tpu-training:tpuVms[0].zone = null" in refused(config)


@pytest.mark.parametrize(
    ("key", "value", "rule"),
    [
        ("tpu-training:tpuVms[0].name", "Demo_TPU", "TPU node name 'Demo_TPU' must be 1-63 lowercase"),
        ("tpu-training:cluster.name", "x" * 41, f"cluster name '{'x' * 41}' must be 1-40 lowercase letters"),
        ("tpu-training:nodePools[0].name", "-pool", "node pool name '-pool' must be 1-40"),
    ],
)
def test_name_rules_in_words_not_regular_expressions(config, key, value, rule):
    section, _, rest = key.removeprefix("tpu-training:").partition(".")
    target = config[f"tpu-training:{section.split('[')[0]}"]
    target = target[0] if "[" in section else target
    target[rest] = value
    message = refused(config)
    assert f"{key} = {json.dumps(value)}: {rule}" in message
    assert "should match pattern" not in message


def test_a_system_pool_beyond_the_cluster_limit_names_its_own_key(config):
    config["tpu-training:cluster"]["systemMaxNodes"] = 100_000
    assert "tpu-training:cluster.systemMaxNodes = 100000: above GKE's limit" in refused(config)


@pytest.mark.parametrize(
    ("block", "reason"),
    [
        ("172.16.0.1/28", "host bits are set); did you mean '172.16.0.0/28'"),
        ("172.16.0.0/028", "write it as"),
    ],
)
def test_control_plane_ranges_say_what_to_write(config, block, reason):
    config["tpu-training:cluster"]["masterIpv4CidrBlock"] = block
    assert reason in refused(config)


@pytest.mark.parametrize("project", ["12:30", '{"a": 1}'])
def test_only_domain_scoped_ids_are_called_domain_scoped(config, project):
    config["gcp:project"] = project
    message = refused(config)
    assert "must be 6 to 30 lowercase letters" in message and "domain-scoped" not in message


# --- Issue 18, item 6: values the cloud refuses are refused at plan time; valid ones are not -----


def test_google_international_lowercase_label_characters_are_valid(config):
    # Resource Manager, "Requirements for labels": "international characters are allowed"; keys
    # start with "a lowercase letter or international character" (naming.LABEL_KEY_RULE).
    config["tpu-training:labels"] = {"équipe": "données", "チ": "東京-1", "ß_b": "٣"}
    vm = run_stack(config).one("gcp:tpu/v2Vm:V2Vm", "demo-tpu-vm")
    assert vm.inputs["labels"]["équipe"] == "données" and vm.inputs["labels"]["チ"] == "東京-1"


@pytest.mark.parametrize(
    ("labels", "fragment"),
    [
        ({"Équipe": "x"}, "labels.Équipe: label key 'Équipe' must be a lowercase letter"),
        ({"1team": "x"}, "labels.1team: label key '1team' must be a lowercase letter"),
        ({"team": "Données"}, "labels.team = \"Données\": label value 'Données' must be"),
        ({"team": "a b"}, "label value 'a b' must be"),
        ({"team": "é" * 64}, "must be up to 63"),
    ],
)
def test_labels_google_refuses(config, labels, fragment):
    config["tpu-training:labels"] = labels
    assert fragment in refused(config)


@pytest.mark.parametrize("version", ["", "   ", "tpu-vm-base extra", "tpu-vm-base\n", "TPU VM"])
def test_runtime_version_blank_or_not_one_token(config, version):
    config[VMS][0]["runtimeVersion"] = version
    message = refused(config)
    assert f"tpu-training:tpuVms[0].runtimeVersion = {json.dumps(version)}: runtime version" in message


@pytest.mark.parametrize(
    ("machine_type", "fragment"),
    [
        ("E2-standard-4", "is not a Compute Engine machine type"),
        ("e2 standard 4", "is not a Compute Engine machine type"),
        ("e2-standard-", "is not a Compute Engine machine type"),
        ("e2_standard_4", "is not a Compute Engine machine type"),
        ("", "is not a Compute Engine machine type"),
        ("ct6e-standard-4t", "is a TPU machine type"),
    ],
)
def test_system_machine_type_that_is_no_compute_engine_machine_type(config, machine_type, fragment):
    config["tpu-training:cluster"]["systemMachineType"] = machine_type
    message = refused(config)
    assert f"tpu-training:cluster.systemMachineType = {json.dumps(machine_type)}" in message
    assert fragment in message


@pytest.mark.parametrize("machine_type", ["n2-custom-4-16384", "e2-micro", "c3-standard-4-lssd"])
def test_system_machine_types_of_every_form_are_valid(config, machine_type):
    config["tpu-training:cluster"]["systemMachineType"] = machine_type
    pool = run_stack(config).one("gcp:container/nodePool:NodePool", "tpu-dev-system")
    assert pool.inputs["nodeConfig"]["machineType"] == machine_type


def _byo_network(config):
    config["tpu-training:network"] = {"create": False}
    return config


@pytest.mark.parametrize(
    ("where", "key", "value", "fragment"),
    [
        (VMS, "network", "My Net", "network 'My Net' must be a network's name"),
        (VMS, "network", "net_1", "must be a network's name"),
        (VMS, "network", "projects//global/networks/n", "must be a network's name"),
        (VMS, "network", "projects/x/global/subnetworks/n", "must be a network's name"),
        (VMS, "subnetwork", "sub net", "subnetwork 'sub net' must be a subnetwork's name"),
        (
            VMS,
            "subnetwork",
            "projects/host-project/regions/us-east5/subnetworks/training",
            "is in region us-east5, but it must be in europe-west4",
        ),
        ("tpu-training:cluster", "network", "-net", "must be a network's name"),
        (
            "tpu-training:cluster",
            "subnetwork",
            "projects/host-project/regions/europe-west4/subnetworks/training",
            "is in region europe-west4, but it must be in us-east5",
        ),
    ],
)
def test_byo_network_names_that_are_no_names_or_paths(config, where, key, value, fragment):
    _byo_network(config)
    target = config[where][0] if where == VMS else config[where]
    target[key] = value
    message = refused(config)
    index = "[0]" if where == VMS else ""
    assert f"{where}{index}" in message and fragment in message


def test_byo_network_names_paths_and_urls_are_valid(config):
    _byo_network(config)
    config[VMS][0]["network"] = "projects/host-project/global/networks/shared"
    config[VMS][0]["subnetwork"] = (
        "https://www.googleapis.com/compute/v1/projects/host-project/regions/europe-west4/subnetworks/tpus"
    )
    config["tpu-training:cluster"].update(network="shared", subnetwork="gke-us-east5")
    vm = run_stack(config).one("gcp:tpu/v2Vm:V2Vm", "demo-tpu-vm")
    assert vm.inputs["networkConfig"]["network"] == "projects/host-project/global/networks/shared"


@pytest.mark.parametrize(
    ("place", "value"),
    [
        ((VMS, 0, "trainCommand"), "python3 train.py\0--resume"),
        ((VMS, 0, "env", "MODEL"), "bert\0"),
        (("tpu-training:labels", "team"), "ml\0"),
        ((JOBS, 0, "command", 0), "python3\0"),
    ],
)
def test_nul_bytes_are_refused_naming_the_key(config, place, value):
    *path, last = place
    target = config
    for part in path:
        target = target.setdefault(part, {}) if isinstance(target, dict) else target[part]
    target[last] = value
    message = refused(config)
    assert "contains a NUL byte" in message
    assert f"{path[0]}" in message


def test_a_startup_script_over_256_kib_of_metadata(config):
    config[VMS][0]["env"] = {"BIG": "x" * (256 * 1024)}
    message = refused(config)
    assert "tpu-training:tpuVms[0] (demo-tpu): the startup-script would be" in message
    assert "262144 bytes (256 KiB) per metadata value" in message
    config[VMS][0]["env"] = {"BIG": "x" * (200 * 1024)}
    script = run_stack(config).one("gcp:tpu/v2Vm:V2Vm", "demo-tpu-vm").inputs["metadata"]["startup-script"]
    assert len(script.encode()) <= 256 * 1024


@pytest.mark.parametrize("name", ["EXECIGNORE", "GLOBIGNORE", "SHLVL", "PWD", "BASH_ENV", "POSIXLY_CORRECT"])
def test_env_names_bash_reads_or_replaces(config, name):
    config[VMS][0]["env"] = {name: "x"}
    assert f"tpu-training:tpuVms[0].env.{name}: environment variable {name} cannot be set in env" in refused(
        config
    )


@pytest.mark.parametrize(
    "name", ["TRAIN_COMMAND", "MARKER", "STATE_DIR", "attempt", "status", "RUN_ENVIRONMENT"]
)
def test_env_names_the_script_uses_itself_reach_the_trainer_as_written(config, name):
    # The script keeps its own variables to itself: the user's value is what the trainer gets.
    config[VMS][0]["env"] = {name: "users value"}
    run = run_stack(config)
    script = run.one("gcp:tpu/v2Vm:V2Vm", "demo-tpu-vm").inputs["metadata"]["startup-script"]
    assert f"\n  '{name}=users value'\n" in script
    assert run.outputs["trainingEnvironments"]["demo-tpu"][name] == "users value"


def test_a_24_hour_maintenance_window_is_valid(config):
    config["tpu-training:cluster"]["maintenanceWindow"] = {
        "startTime": "03:00",
        "endTime": "03:00",
        "recurrence": "FREQ=WEEKLY;BYDAY=SA",
    }
    cluster = run_stack(config).one("gcp:container/cluster:Cluster", "tpu-dev-cluster")
    window = cluster.inputs["maintenancePolicy"]["recurringWindow"]
    assert (window["startTime"], window["endTime"]) == ("2025-01-04T03:00:00Z", "2025-01-05T03:00:00Z")


def test_min_version_latest_is_valid(config):
    config["tpu-training:cluster"]["minVersion"] = "latest"
    cluster = run_stack(config).one("gcp:container/cluster:Cluster", "tpu-dev-cluster")
    assert cluster.inputs["minMasterVersion"] == "latest"


@pytest.mark.parametrize("version", ["newest", "Latest", "1.32"])
def test_min_versions_that_are_not_latest_or_new_enough(config, version):
    config["tpu-training:cluster"]["minVersion"] = version
    assert f"tpu-training:cluster.minVersion = {json.dumps(version)}" in refused(config)


@pytest.mark.parametrize(
    ("generation", "fragment"),
    [
        (10**15 - 1, "above the largest recovery generation, 999999999999998"),
        (10**70, "above the largest recovery generation"),
        (1e300, "above the largest recovery generation"),
        (-1, "is no recovery generation"),
        ("7", "is no recovery generation"),
        (2.5, "is no recovery generation"),
    ],
)
def test_previous_generations_that_make_no_label_value_are_refused(tmp_path, generation, fragment):
    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps({"recoveryGenerations": {"demo-tpu": generation}}))
    done = run_plan("--previous-outputs", str(outputs))
    assert done.returncode == 64, done.stdout + done.stderr  # a usage error, as the plan's others
    assert "recoveryGenerations.demo-tpu = " in done.stderr and fragment in done.stderr
    assert "Traceback" not in done.stderr


def test_the_largest_generation_and_the_next_one_read_back_from_the_label():
    from tpu_training_components.domain.recovery import GENERATION_LABEL, parse_generation

    largest = naming.MAX_RECOVERY_GENERATION
    assert naming.generation_problem(largest) is None and naming.generation_problem(largest + 1)
    for generation in (largest, largest + 1):
        assert naming.label_value_problem(str(generation)) is None
        assert parse_generation({GENERATION_LABEL: str(generation)}) == generation


@pytest.mark.parametrize(
    ("edit", "key"),
    [
        (lambda c: c["tpu-training:nodePools"][0].update(maxRunDuration="72h\n"), "maxRunDuration"),
        (lambda c: c["tpu-training:jobs"][0].update(namespace="default\n"), "namespace"),
        (lambda c: c["tpu-training:jobs"][0].update(image="trainer:1\n"), "image"),
        (lambda c: c["tpu-training:cluster"].update(minVersion="1.34\n"), "minVersion"),
    ],
    ids=["maxRunDuration", "namespace", "image", "minVersion"],
)
def test_a_trailing_newline_is_not_a_valid_value(config, edit, key):
    # A `$`-anchored pattern matches before a final newline; the cloud takes no such value.
    edit(config)
    assert key in refused(config)


# --- Issue 38: monitoring.notify ------------------------------------------------------------------


def test_a_notify_target_that_is_not_an_email_is_refused_naming_the_key_the_value_and_the_form(config):
    config["tpu-training:monitoring"] = {"notify": ["email:ops@example.com", "pagerduty:abc"]}
    message = refused(config)
    assert 'tpu-training:monitoring.notify[1] = "pagerduty:abc"' in message
    assert "allowed: 'email:ADDRESS'" in message and "notify[0]" not in message
