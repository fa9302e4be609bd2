"""The dev stack moves to another project with one edit (`pulumi config set gcp:project MINE`):
no value names another project's bucket, the trainer travels with the stack (uploaded to each
checkpoint bucket, found at $TRAINER_CODE), and a command that names a bucket by hand is warned
about."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import sys
from pathlib import Path

from support.harness.in_process import run_plan
from support.harness.program import REPO, refused, run_stack

from tpu_training.stack_config.storage import unlisted_sibling_imports

BUCKET_OBJECT = "gcp:storage/bucketObject:BucketObject"
TRAINER_FILES = sorted(path.name for path in (REPO / "trainer").iterdir() if path.suffix == ".py") + [
    "requirements.txt"
]
"""The reference trainer's whole folder: its modules, imported by train.py from where they are copied
to, and its requirements (nothing else is in it)."""


def test_one_edit_moves_the_dev_stack_to_another_project(config):
    config["gcp:project"] = "my-own-project-1"
    run = run_stack(config)
    inputs = json.dumps([r.inputs for r in run.registrations])
    buckets = {r.inputs["name"] for r in run.by_type("gcp:storage/bucket:Bucket")}
    assert buckets == {"my-own-project-1-dev-ckpt-europe-west4", "my-own-project-1-dev-ckpt-us-east5"}
    # Every bucket any input names (commands, environments, uploads) is one of the stack's own.
    assert set(re.findall(r"gs://([a-z0-9._-]+)", inputs)) == buckets
    assert '"project": "tpu-training-dev"' not in inputs  # the dev stack's own GCP project
    assert not [w for w in run.warnings if "not one of this stack's buckets" in w]
    assert run.outputs["trainingEnvironments"]["demo-tpu"]["TRAINER_CODE"] == (
        "gs://my-own-project-1-dev-ckpt-europe-west4/code"
    )


def test_the_trainer_is_uploaded_to_every_checkpoint_bucket(config):
    run = run_stack(config)
    uploads = {(r.inputs["bucket"], r.inputs["name"]): r.inputs["source"] for r in run.by_type(BUCKET_OBJECT)}
    assert uploads == {
        (f"tpu-training-dev-dev-ckpt-{region}", f"code/{name}"): {
            "fileAsset": f"trainer/{name}",
            "sha256": hashlib.sha256((REPO / "trainer" / name).read_bytes()).hexdigest(),
        }
        for region in ("europe-west4", "us-east5")
        for name in TRAINER_FILES
    }
    (job_parameters,) = run.by_type("kubernetes:core/v1:ConfigMap")
    assert job_parameters.inputs["data"]["TRAINER_CODE"] == "gs://tpu-training-dev-dev-ckpt-us-east5/code"


def test_a_command_that_names_a_bucket_of_another_project_is_warned_about(config):
    config["tpu-training:tpuVms"][0]["setupCommand"] = "gsutil cp gs://someone-elses-bucket/train.py /opt/"
    run = run_stack(config)
    (warning,) = [w for w in run.warnings if "not one of this stack's buckets" in w]
    assert "tpu-training:tpuVms[0].setupCommand names gs://someone-elses-bucket" in warning
    assert "use $TRAINER_CODE" in warning


def test_a_command_that_names_the_stacks_own_bucket_is_not_warned_about(config):
    config["tpu-training:tpuVms"][0]["setupCommand"] = (
        "gsutil ls gs://tpu-training-dev-dev-ckpt-europe-west4/x"
    )
    run = run_stack(config)
    assert not [w for w in run.warnings if "not one of this stack's buckets" in w]


def test_trainer_files_that_are_not_there_are_refused_by_name(config):
    config["tpu-training:trainerCode"] = {"folder": "trainer", "files": ["nope.py"]}
    assert "tpu-training:trainerCode" in refused(config) and "trainer/nope.py is not a file" in refused(
        config
    )
    config["tpu-training:trainerCode"] = {"folder": "../elsewhere", "files": ["train.py"]}
    assert "must be a path inside the project" in refused(config)
    config["tpu-training:trainerCode"] = {"folder": "trainer", "files": ["a/b.py"]}
    assert "must be a file name in the folder" in refused(config)


def test_without_trainer_code_nothing_is_uploaded(config):
    del config["tpu-training:trainerCode"]
    run = run_stack(config)
    assert run.by_type(BUCKET_OBJECT) == []
    assert "TRAINER_CODE" not in run.outputs["trainingEnvironments"]["demo-tpu"]


def test_a_module_the_trainer_imports_from_its_folder_and_files_leave_out_is_named(tmp_path):
    # A VM or Pod copies code/ into one folder and runs the entry there: a sibling module that is
    # not uploaded stops the trainer with ModuleNotFoundError on every VM, after the plan said yes.
    (tmp_path / "train.py").write_text(
        "import json\nimport settings\nfrom hosts import Hosts\n\ndef f():\n    import model.parts\n"
    )
    (tmp_path / "settings.py").write_text("import json\n")
    (tmp_path / "model.py").write_text("import storage\n")  # unlisted, imported: read too
    (tmp_path / "hosts.py").write_text("import storage\n")
    (tmp_path / "storage.py").write_text("")
    (tmp_path / "notes.txt").write_text("import settings\n")  # not Python: not read
    (tmp_path / "broken.py").write_text("import settings\ndef (:\n")  # does not parse: not read
    listed = ("train.py", "hosts.py", "broken.py", "notes.txt")
    assert unlisted_sibling_imports(tmp_path, listed) == {
        "train.py": ["model.py", "settings.py"],  # lazy imports count; json is no sibling
        "hosts.py": ["storage.py"],
        "model.py": ["storage.py"],
    }
    everything = ("train.py", "settings.py", "hosts.py", "model.py", "storage.py")
    assert unlisted_sibling_imports(tmp_path, everything) == {}


def test_the_dev_stack_refuses_a_trainer_without_the_modules_train_py_imports(config):
    config["tpu-training:trainerCode"] = {"folder": "trainer", "files": ["train.py", "requirements.txt"]}
    message = refused(config)
    modules = [name for name in TRAINER_FILES if name not in ("train.py", "requirements.txt")]
    assert "tpu-training:trainerCode" in message and "ModuleNotFoundError" in message, message
    assert "files leaves out modules of trainer/ that the listed code imports: " in message
    assert "outcomes.py (imported by train.py)" in message
    assert f"add {', '.join(repr(name) for name in modules)}" in message


def test_a_copy_of_the_project_planned_in_this_process_leaves_the_next_plan_its_own_files(tmp_path):
    """One process planning two copies of the project in turn (as the engine tier's predictions
    do): each program reads its own folder's trainer, not the first one's (a `stack_config`
    left in sys.modules by the first program once made the second upload the first's files)."""
    copy = tmp_path / "copy"
    copy.mkdir()
    shutil.copy(REPO / "Pulumi.yaml", copy / "Pulumi.yaml")
    shutil.copy(REPO / "Pulumi.dev.yaml", copy / "Pulumi.dev.yaml")
    for part in ("infra", "trainer"):
        # Not infra/.venv: a link to the project's virtualenv (pulumi/pulumi#7061), gigabytes if followed.
        shutil.copytree(REPO / part, copy / part, ignore=shutil.ignore_patterns("__pycache__", ".venv"))
    path_before, config_module_before = list(sys.path), sys.modules.get("stack_config")

    def sources(cwd: Path) -> set[str]:
        done = run_plan("--json", "-", cwd=cwd)
        assert done.returncode in (0, 1), done.stderr
        resources = json.loads(done.stdout)["resources"]
        return {r["inputs"]["source"]["fileAsset"] for r in resources if r["type"] == BUCKET_OBJECT}

    # (A file outside this repository is shown by its absolute path.)
    assert sources(copy) == {str(copy / "trainer" / name) for name in TRAINER_FILES}
    assert sources(REPO) == {f"trainer/{name}" for name in TRAINER_FILES}
    # And the process is left as it was found.
    assert sys.path == path_before and sys.modules.get("stack_config") is config_module_before
