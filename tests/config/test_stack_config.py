"""Stack config: the dev baseline is valid; each bad-input class is refused with a clear message
that names the key, shows the value and says what is allowed, before any resource is declared."""

from __future__ import annotations

import json
import shlex
import shutil

import pytest
from support.harness.in_process import run_plan
from support.harness.program import REPO, run_stack
from support.harness.program import refused as _refused

from tpu_training import project_files

VMS = "tpu-training:tpuVms"


def _vms_only(config):
    """The dev config without its GKE part: the TPU VMs alone, in one region."""
    for key in ("tpu-training:cluster", "tpu-training:nodePools", "tpu-training:jobs"):
        config.pop(key)
    return config


def test_dev_baseline_is_valid(config):
    run = run_stack(config)
    declared = {r.type for r in run.registrations}
    assert {
        "gcp:tpu/v2Vm:V2Vm",
        "gcp:storage/bucket:Bucket",
        "gcp:container/cluster:Cluster",
        "gcp:container/nodePool:NodePool",
        "kubernetes:batch/v1:Job",
    } <= declared
    # No warning: the template every stack starts from plans clean (its 20 s save fits the 25 s a
    # preempted VM's shutdown script has, tests/domain/test_termination_grace.py).
    assert run.warnings == []


def test_unknown_accelerator_type(config):
    config[VMS][0]["acceleratorType"] = "v3-9"
    message = _refused(config)
    assert 'tpu-training:tpuVms[0].acceleratorType = "v3-9"' in message
    assert "must be one of 8, 32, 64" in message


def test_a_generation_name_for_an_accelerator_type_gets_the_api_name(config):
    config[VMS][0]["acceleratorType"] = "v5e-8"
    message = _refused(config)
    assert 'tpu-training:tpuVms[0].acceleratorType = "v5e-8"' in message
    assert "(did you mean 'v5litepod-8'?)" in message


def test_zone_that_is_not_a_zone(config):
    config[VMS][0]["zone"] = "europe-west4"
    message = _refused(config)
    assert 'tpu-training:tpuVms[0].zone = "europe-west4"' in message
    assert "such as 'europe-west4-a'" in message


def test_bucket_location_outside_the_tpu_region(config):
    _vms_only(config)
    config["tpu-training:bucket"] = {"location": "us-central1"}
    message = _refused(config)
    assert "bucket.location = 'us-central1' differs from the TPUs' region europe-west4" in message


def test_bucket_location_in_the_tpu_region_is_fine(config):
    _vms_only(config)
    config["tpu-training:bucket"] = {"location": "europe-west4"}
    run_stack(config)


def test_explicit_bucket_name_with_two_regions(config):
    _vms_only(config)
    second = dict(config[VMS][0], name="other", zone="us-central2-b")
    config[VMS].append(second)
    config["tpu-training:bucket"] = {"name": "my-checkpoints"}
    message = _refused(config)
    assert "names one bucket, but the TPUs use 2 regions (europe-west4, us-central2)" in message


@pytest.mark.parametrize("bad", [-4, 0, 12.5, "128", True])
def test_negative_zero_or_non_integer_sizes(config, bad):
    config["tpu-training:training"]["perCoreBatchSize"] = bad
    message = _refused(config)
    assert "tpu-training:training.perCoreBatchSize = " in message


def test_unknown_nested_key_suggests_the_right_one(config):
    config[VMS][0]["acceleratorTyp"] = "v3-8"
    message = _refused(config)
    assert "tpu-training:tpuVms[0].acceleratorTyp: unknown key (did you mean 'acceleratorType'?)" in message
    assert "allowed in tpu-training:tpuVms[0]:" in message


def test_unknown_top_level_key_suggests_the_right_one(config):
    config["tpu-training:tpuVm"] = []
    message = _refused(config)
    assert "tpu-training:tpuVm: unknown key (did you mean 'tpuVms'?)" in message


def test_provisioning_lists_the_choices(config):
    config[VMS][0]["provisioning"] = "cheap"
    message = _refused(config)
    assert "must be one of preemptible, spot, on-demand, reserved, flex-start, or a list of them" in message


def test_duplicate_vm_names(config):
    config[VMS].append(dict(config[VMS][0]))
    assert "TPU VM names must be unique; repeated: demo-tpu" in _refused(config)


def test_both_or_neither_of_examples_and_epochs(config):
    config["tpu-training:training"]["epochs"] = 3
    assert "set exactly one of totalExamples and epochs" in _refused(config)


def test_scaling_without_a_base_learning_rate(config):
    del config["tpu-training:training"]["baseLearningRate"]
    assert "learningRateScaling 'linear' needs baseLearningRate" in _refused(config)


def test_bad_labels(config):
    config["tpu-training:labels"] = {"Team": "ML"}
    assert "label key 'Team' must be a lowercase letter" in _refused(config)


def test_missing_gcp_project(config):
    del config["gcp:project"]
    assert "gcp:project: required but not set" in _refused(config)


def test_every_problem_is_reported_at_once(config):
    config[VMS][0]["zone"] = "nowhere"
    config["tpu-training:training"]["perCoreBatchSize"] = -1
    message = _refused(config)
    assert "tpuVms[0].zone" in message and "perCoreBatchSize" in message


def test_a_plain_string_where_an_object_belongs(config):
    config["tpu-training:training"] = "fast please"
    assert "expected a structured value" in _refused(config)


# --- the network (conformance issue: private TPU VMs must reach their bucket) ---------------------

NETWORK = "tpu-training:network"
TPU_VM = "gcp:tpu/v2Vm:V2Vm"


def test_tpu_vm_and_cluster_use_the_declared_network_with_google_access_and_nat(config):
    run = run_stack(config)
    vm = run.one(TPU_VM, "demo-tpu-vm").inputs["networkConfig"]
    assert vm["enableExternalIps"] is False
    subnet = run.one("gcp:compute/subnetwork:Subnetwork", "network-subnet-europe-west4")
    assert vm["subnetwork"] == f"{subnet.name}-id" and vm["network"] == "network-vpc-id"
    assert subnet.inputs["privateIpGoogleAccess"] is True
    nats = {r.inputs["region"] for r in run.by_type("gcp:compute/routerNat:RouterNat")}
    assert nats == {"europe-west4", "us-east5"}  # one per region in use: the VM's and the cluster's
    cluster = run.one("gcp:container/cluster:Cluster", "tpu-dev-cluster").inputs
    assert (cluster["network"], cluster["subnetwork"]) == ("network-vpc-id", "network-subnet-us-east5-id")
    assert cluster["ipAllocationPolicy"] == {
        "clusterSecondaryRangeName": "gke-pods",
        "servicesSecondaryRangeName": "gke-services",
    }
    # Both wait for the whole network, NAT included: the startup script and image pulls need it.
    nat_urns = {r.urn for r in run.by_type("gcp:compute/routerNat:RouterNat")}
    assert nat_urns <= set(run.one("tpu-training:compute:PreemptibleTpuVm", "demo-tpu").options["dependsOn"])
    assert nat_urns <= set(run.one("tpu-training:gke:GkeTpuCluster", "tpu-dev").options["dependsOn"])


def test_network_is_named_after_the_stack_unless_named(config):
    # A stack name that is not DNS-safe is made so, with a hash of it, as in every name made from it.
    run = run_stack(config, stack="dev.eu")
    network = run.one("gcp:compute/network:Network", "network-vpc")
    assert network.inputs["name"] == "tpu-training-dev-eu-46d7d943"
    config[NETWORK] = {"name": "ml-vpc", "iapSsh": False}
    run = run_stack(config)
    assert run.one("gcp:compute/network:Network", "network-vpc").inputs["name"] == "ml-vpc"
    assert not [r for r in run.by_type("gcp:compute/firewall:Firewall") if r.name.endswith("iap-ssh")]


def test_bringing_your_own_network_warns_that_it_must_reach_google(config):
    config[NETWORK] = {"create": False}
    config[VMS][0].update(network="corp-vpc", subnetwork="corp-europe-west4")
    run = run_stack(config)
    assert not run.by_type("gcp:compute/network:Network")
    vm = run.one(TPU_VM, "demo-tpu-vm").inputs["networkConfig"]
    assert (vm["network"], vm["subnetwork"]) == ("corp-vpc", "corp-europe-west4")
    assert any("network.create is false" in w and "Private Google Access" in w for w in run.warnings)


def test_per_resource_networks_need_create_false(config):
    config[VMS][0]["network"] = "corp-vpc"
    config["tpu-training:cluster"]["subnetwork"] = "corp-sub"
    message = _refused(config)
    assert "tpu-training:tpuVms[0].network is set, but tpu-training:network.create is true" in message
    assert "tpu-training:cluster.subnetwork is set" in message


@pytest.mark.parametrize(
    ("network", "message"),
    [
        ({"name": "Bad_Name"}, 'tpu-training:network.name = "Bad_Name"'),
        ({"create": "yes"}, 'tpu-training:network.create = "yes"'),
        ({"iapSSH": True}, "tpu-training:network.iapSSH: unknown key (did you mean 'iapSsh'?)"),
    ],
)
def test_network_config_is_validated(config, network, message):
    config[NETWORK] = network
    assert message in _refused(config)


def test_network_settings_ignored_without_create_are_a_warning(config):
    config[NETWORK] = {"create": False, "name": "ml-vpc"}
    run = run_stack(config)
    assert any(
        "network.name and iapSsh apply only to the network the stack declares" in w for w in run.warnings
    )


def test_an_empty_per_resource_network_is_no_network_name(config):
    config["tpu-training:cluster"]["network"] = ""
    assert "tpu-training:cluster.network = \"\": network '' must be a network's name" in _refused(config)


# --- stackConfigDir: the stack files live where Pulumi.yaml says --------------------------------


def test_stack_config_dir_is_where_the_plan_reads_the_stack_file(scratch_project):
    """pulumi/pulumi sdk/go/common/workspace/paths.go, ProjectStackPath: Pulumi.<stack>.yaml is in
    ``stackConfigDir``, joined to Pulumi.yaml's folder."""
    project_file = scratch_project / "Pulumi.yaml"
    project_file.write_text(project_file.read_text() + "stackConfigDir: stacks\n")
    (scratch_project / "stacks").mkdir()
    shutil.copy(REPO / "Pulumi.dev.yaml", scratch_project / "stacks" / "Pulumi.dev.yaml")
    done = run_plan("--json", "-", cwd=scratch_project)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["stack"] == "dev"
    # Not beside Pulumi.yaml any more: a stack file there is not read.
    (scratch_project / "stacks" / "Pulumi.dev.yaml").rename(scratch_project / "Pulumi.dev.yaml")
    done = run_plan("--json", "-", cwd=scratch_project)
    assert done.returncode != 0 and "stacks/Pulumi.dev.yaml" in done.stderr


def test_the_older_config_folder_spelling_and_both_at_once(scratch_project):
    # project.go, RewriteConfigPathIntoStackConfigDir: `config: <folder>` is the older spelling.
    assert project_files.load_project(REPO).stack_file("dev") == REPO / "Pulumi.dev.yaml"
    project_file = scratch_project / "Pulumi.yaml"
    project_file.write_text("name: tpu-training\nruntime: python\nmain: infra/\nconfig: stacks\n")
    project = project_files.load_project(scratch_project)
    assert project.stack_file("dev") == scratch_project / "stacks" / "Pulumi.dev.yaml"
    assert project.declarations == {}
    project_file.write_text(project_file.read_text() + "stackConfigDir: other\n")
    with pytest.raises(project_files.ProjectFileError, match="Should not use both config and stackConfigDir"):
        project_files.load_project(scratch_project)


def test_a_list_given_as_one_value_says_list_not_tuple(config):
    from support.harness.program import refused

    config["tpu-training:nodePools"][0]["nodeLocations"] = "us-east5-a"
    message = refused(config)
    assert (
        'tpu-training:nodePools[0].nodeLocations = "us-east5-a": should be a list '
        "(in YAML, for example [us-east5-a])" in message
    )
    assert "tuple" not in message


@pytest.mark.parametrize(
    ("command", "hint"),
    [
        ("python3 train.py", "[python3, train.py]"),
        ("python3 train.py --steps 10", '[python3, train.py, --steps, "10"]'),
        ("bash -c 'python3 train.py --resume'", '[bash, -c, "python3 train.py --resume"]'),
    ],
)
def test_a_command_given_as_one_string_is_refused_with_the_list_it_meant(config, command, hint):
    from ruamel.yaml import YAML

    config["tpu-training:jobs"][0]["command"] = command
    message = _refused(config)
    assert (
        f"tpu-training:jobs[0].command = {json.dumps(command)}: should be a list "
        f"(in YAML, for example {hint})" in message
    )
    # The hint is the list it names: as YAML it reads back as the command's words, which plan.
    words = YAML(typ="safe").load(hint)
    assert words == shlex.split(command)
    config["tpu-training:jobs"][0]["command"] = words
    assert run_stack(config).by_type("kubernetes:batch/v1:Job")


# --- runtimeVersion against the TPU generation (Google's "TPU software versions" page) --------


def _vm(config, **fields):
    config["tpu-training:tpuVms"][0].update(fields)
    return config


def test_a_runtime_named_for_another_generation_is_refused_with_the_right_one(config):
    message = _refused(
        _vm(config, acceleratorType="v5litepod-8", zone="us-west4-a", runtimeVersion="v2-alpha-tpuv6e")
    )
    assert (
        "tpu-training:tpuVms[0].runtimeVersion = \"v2-alpha-tpuv6e\": 'v2-alpha-tpuv6e' is the TPU "
        "software version for TPU v6e, "
        "not v5e (Google's TPU software versions page, https://cloud.google.com/tpu/docs/runtimes); "
        "for JAX or PyTorch on v5e use 'v2-alpha-tpuv5-lite'"
    ) in message


@pytest.mark.parametrize(
    ("accelerator", "zone", "runtime"),
    [
        ("v5litepod-8", "us-west4-a", "v2-alpha-tpuv5-lite"),
        ("v6e-8", "us-east5-a", "v2-alpha-tpuv6e"),
        ("v3-8", "europe-west4-a", "tpu-ubuntu2204-base"),
        ("v4-8", "us-central2-b", "tpu-vm-v4-base"),
    ],
)
def test_the_runtime_google_lists_for_the_generation_plans_without_a_word(config, accelerator, zone, runtime):
    run = run_stack(_vm(config, acceleratorType=accelerator, zone=zone, runtimeVersion=runtime))
    assert [w for w in run.warnings if "runtimeVersion" in w] == []


def test_a_v2_to_v4_tensorflow_runtime_on_v5e_is_warned_about(config):
    run = run_stack(_vm(config, acceleratorType="v5litepod-8", zone="us-west4-a"))  # tpu-vm-tf-2.16.1-pjrt
    (warning,) = [w for w in run.warnings if "runtimeVersion" in w]
    assert warning.startswith(
        "tpu-training:tpuVms[0].runtimeVersion: 'tpu-vm-tf-2.16.1-pjrt' is a TensorFlow version; make sure "
        "the zone offers it for TPU v5e"
    )
    assert "use 'v2-alpha-tpuv5-lite'" in warning


def test_a_pod_tensorflow_runtime_on_one_host_is_warned_about(config):
    run = run_stack(_vm(config, runtimeVersion="tpu-vm-tf-2.16.1-pod-pjrt"))
    assert any("for multi-host slices (-pod), and this TPU is a single host" in w for w in run.warnings)


def test_the_dev_project_in_another_stack_is_warned_about(config):
    assert not [w for w in run_stack(config, stack="dev").warnings if "dev stack's project" in w]
    (warning,) = [w for w in run_stack(config, stack="mystack").warnings if "dev stack's project" in w]
    assert "pulumi config set gcp:project MY_PROJECT --stack mystack" in warning
    config["gcp:project"] = "my-own-project"
    assert not [w for w in run_stack(config, stack="mystack").warnings if "dev stack's project" in w]
