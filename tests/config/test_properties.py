"""Bad input the tests make up themselves (hypothesis): stack files and live API answers.

- A stack file is the dev stack with one to three random changes (a value replaced by junk, a
  key dropped or added). `tpu-training plan` ends with 0 or 2 and no traceback, and every
  problem it reports names a `tpu-training:` or `gcp:` key.
- A live answer holds a working node or Job amid random other nodes, Jobs and fields. Its
  generation never changes: at most the probe gives up, and then the last deployed one stands.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.fakes.fake_kube_api import FakeKubernetesApi, job
from support.fakes.fake_tpu_api import FakeTpuApi
from support.harness.program import INFRA, REPO, dev_config
from tpu_training_components.live.kube_client import ClusterRef
from tpu_training_components.live.tpu_api import make_client
from tpu_training_components.resources import reconcile

from tpu_training import exit_codes
from tpu_training.commands import plan

# ---------------------------------------------------------------------------------------------
# Stack files
# ---------------------------------------------------------------------------------------------

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(
        ["", " ", "v3-8", "europe-west4-a", "us-east5", "kube-system", "PATH", "0", "-1", "x" * 70]
    ),
)
_junk = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(min_size=1, max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)


def _paths(value: Any, here: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every place in the config tree: top-level keys, nested keys, list items."""
    if here:
        yield here
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _paths(child, (*here, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _paths(child, (*here, index))


def _parent(config: dict[str, Any], path: tuple[Any, ...]) -> Any:
    node: Any = config
    for part in path[:-1]:
        node = node[part]
    return node


@st.composite
def stack_configs(draw: st.DrawFn) -> dict[str, Any]:
    config = copy.deepcopy(dev_config())
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(sorted(_paths(config), key=repr)))
        parent = _parent(config, path)
        change = draw(st.sampled_from(["replace", "replace", "drop", "add"]))
        if change == "replace":
            parent[path[-1]] = draw(_junk)
        elif change == "drop" and isinstance(parent, dict):
            del parent[path[-1]]
        elif change == "add" and isinstance(parent, dict):
            parent[draw(st.text(min_size=1, max_size=10))] = draw(_junk)
    return config


@pytest.fixture(scope="module")
def project() -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="tpu-training-properties-"))
    shutil.copy(REPO / "Pulumi.yaml", folder / "Pulumi.yaml")
    (folder / "infra").symlink_to(INFRA, target_is_directory=True)
    (folder / "trainer").symlink_to(INFRA.parent / "trainer", target_is_directory=True)
    yield folder
    shutil.rmtree(folder)


def _run_plan(project: Path, config: dict[str, Any]) -> tuple[int, str]:
    (project / "Pulumi.prop.yaml").write_text(yaml.safe_dump({"config": config}, allow_unicode=True))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(project), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        # An exception escaping main() is what a user would see as a traceback.
        status = plan.main(["--stack", "prop"])
    return status, err.getvalue()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(config=stack_configs())
def test_generated_stack_files_exit_0_or_2_and_every_problem_names_a_key(project, config):
    status, stderr = _run_plan(project, config)
    assert status in (exit_codes.EXIT_OK, exit_codes.EXIT_CONFIG_ERROR), stderr
    if status == exit_codes.EXIT_CONFIG_ERROR:
        problems = [line for line in stderr.splitlines() if line.startswith(("  - ", "error: "))]
        problems = [p for p in problems if not p.startswith("error: invalid configuration for stack")]
        assert problems, stderr
        for problem in problems:
            assert "tpu-training:" in problem or "gcp:" in problem, stderr


def test_the_generator_reaches_both_outcomes(project):
    """The property above would hold vacuously if every generated file were refused."""
    assert _run_plan(project, dev_config())[0] == exit_codes.EXIT_OK
    broken = dev_config()
    broken["tpu-training:tpuVms"][0]["zone"] = 7
    assert _run_plan(project, broken)[0] == exit_codes.EXIT_CONFIG_ERROR


# ---------------------------------------------------------------------------------------------
# Live answers
# ---------------------------------------------------------------------------------------------

ZONE = "europe-west4-a"
_json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**40), 2**40), st.text(max_size=10))
_json = st.recursive(
    _json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=5,
)
_extra_fields = st.dictionaries(
    st.text(max_size=12).filter(
        lambda key: key not in {"name", "state", "health", "labels", "metadata", "status"}
    ),
    _json,
    max_size=3,
)
# Our own names too: an answer that names a node or Job twice must not decide by the last one.
_other_names = st.one_of(
    st.sampled_from(["demo-tpu", "train"]),
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz-0123456789", min_size=1, max_size=12),
)


@st.composite
def answers_with_a_working_node(draw: st.DrawFn) -> bytes:
    node: dict[str, Any] = {
        "name": f"projects/p/locations/{ZONE}/nodes/demo-tpu",
        "state": draw(st.sampled_from(["READY", "CREATING", "STARTING", "RESTARTING", "REPAIRING"])),
        "labels": {
            "recovery-generation": "3",
            **draw(
                st.dictionaries(
                    st.text(max_size=8).filter(lambda k: k != "recovery-generation"), _json, max_size=2
                )
            ),
        },
        **draw(
            st.fixed_dictionaries(
                {}, optional={"healthDescription": _json, "createTime": _json, "health": st.just("HEALTHY")}
            )
        ),
        **draw(_extra_fields),
    }
    others = draw(
        st.lists(
            st.one_of(
                _json,
                st.builds(
                    lambda name, fields: {"name": f"projects/p/locations/{ZONE}/nodes/{name}", **fields},
                    _other_names,
                    _extra_fields,
                ),
            ),
            max_size=3,
        )
    )
    nodes = draw(st.permutations([node, *others]))
    return json.dumps(
        {
            "nodes": nodes,
            **draw(_extra_fields.map(lambda f: {k: v for k, v in f.items() if k != "nextPageToken"})),
        }
    ).encode()


@pytest.fixture(scope="module")
def tpu_api() -> Iterator[FakeTpuApi]:
    with FakeTpuApi() as api:
        yield api


@pytest.mark.filterwarnings("ignore::UserWarning")
@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(body=answers_with_a_working_node())
def test_no_answer_changes_the_generation_of_a_working_node(tpu_api, body):
    tpu_api.raw_body = body
    (decision,) = reconcile.reconcile_tpu_vms("p", [("demo-tpu", ZONE)], client=make_client(tpu_api.endpoint))
    assert decision.action == "keep", (decision.message, body)
    assert decision.generation in (3, None) and not decision.after_last_deployed, (decision.message, body)


@st.composite
def answers_with_a_running_job(draw: st.DrawFn) -> bytes:
    ours = job("train", generation=2, active=draw(st.integers(1, 4)))
    ours["metadata"].update(draw(_extra_fields))
    others = draw(
        st.lists(
            st.one_of(
                _json,
                st.builds(lambda name: job(name, generation=0, failed=1), _other_names),
                st.builds(
                    lambda name: job(name, generation=0, conditions=(("Failed", "True", "X"),)), _other_names
                ),
            ),
            max_size=3,
        )
    )
    items = draw(st.permutations([ours, *others]))
    return json.dumps(
        {"apiVersion": "batch/v1", "kind": "JobList", "items": items, **draw(_extra_fields)}
    ).encode()


@pytest.fixture(scope="module")
def kube_api(tmp_path_factory) -> Iterator[tuple[FakeKubernetesApi, str]]:
    with FakeKubernetesApi() as api:
        yield api, str(api.kubeconfig(tmp_path_factory.mktemp("kube")))


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(body=answers_with_a_running_job())
def test_no_answer_changes_the_generation_of_a_running_job(kube_api, body):
    api, kubeconfig = kube_api
    api.raw_body = body

    def read(cluster: ClusterRef, namespaces: set[str]):
        from tpu_training_components.live.kube_api import list_live_jobs

        return list_live_jobs(cluster, namespaces, kubeconfig=kubeconfig)

    (decision,) = reconcile.reconcile_jobs(
        ClusterRef("p", "us-east5", "tpu-dev"), [("train", "default")], read=read
    )
    assert decision.action == "keep", (decision.message, body)
    assert decision.generation in (2, None) and not decision.after_last_deployed, (decision.message, body)
