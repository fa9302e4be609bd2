"""README "Under the real Pulumi engine, still offline": its lines, exactly as written, in a fresh
copy of the project, with the engine .ci/engine built. Nothing of the harness stands between them
and the user's shell: the real CLI and language host start the program and the policy of a
virtualenv as a user's would (new interpreters), and the stand-in APIs are the ones
``offline_cloud.py`` starts for the user."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from support.harness.engine.engine import REPO

BLOCK_HEADING = "### Under the real Pulumi engine, still offline"
COPY_LINE = "cp Pulumi.dev.yaml Pulumi.mystack.yaml"
"""The README's line, in "Your own stack", that makes the stack file these lines use."""
RECOVER = ".venv/bin/tpu-training recover --once --stack mystack"
TIMEOUT = 600
"""Seconds the lines may take on a loaded two-core machine (about 40 s quiet)."""


def _readme_block() -> list[str]:
    """The commands of the fenced block under the heading, comments dropped."""
    readme = (REPO / "README.md").read_text()
    after = readme[readme.index(BLOCK_HEADING) :]
    block = re.search(r"```bash\n(.*?)```", after, re.S)
    assert block is not None, f"no bash block under {BLOCK_HEADING!r}"
    return [line.split("  #")[0].rstrip() for line in block.group(1).splitlines() if line.strip()]


def _fresh_copy(folder: Path) -> Path:
    """What a clone of this working tree holds (tracked files and new ones git does not ignore), with
    the README's virtualenv and the built engine linked in, as a user's clone has them after
    README command 1 and `bash .ci/engine`."""
    listed = (
        subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
            cwd=REPO,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, folder / name)
    for built in (".venv", ".engine"):
        (folder / built).symlink_to(REPO / built)
    return folder


def _shell(lines: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """The lines in one bash, stopping at the first that fails (each line traced on stderr)."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PULUMI_", "ENGINE_", "TESTS_"))
        and key not in ("TPU_TRAINING_OFFLINE", "PYTHONPATH", "KUBECONFIG")
        and not key.endswith("_API_ENDPOINT")
    }
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-xc", "\n".join(lines)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, f"the README's lines failed:\n{done.stdout[-5000:]}\n{done.stderr[-5000:]}"
    return done


def _tpu_node(env_file: Path, zone: str, name: str) -> Any:
    """The node as the stand-in Cloud TPU API serves it (its endpoint from .offline/env)."""
    endpoint = re.search(r"^export TPU_API_ENDPOINT=(\S+)$", env_file.read_text(), re.M)
    assert endpoint is not None
    url = f"{endpoint.group(1).strip(chr(39))}/v2/projects/my-project/locations/{zone}/nodes/{name}"
    with urllib.request.urlopen(url, timeout=30) as answer:
        return json.load(answer)


@pytest.mark.slow  # the tier's longest: started first
def test_the_readme_lines_preview_up_recover_and_destroy_your_own_stack_offline(
    engine: str, tmp_path: Path
) -> None:
    lines = _readme_block()
    assert COPY_LINE in (REPO / "README.md").read_text()
    assert RECOVER in lines and lines[-1].endswith("offline_cloud.py stop .offline"), lines
    project = _fresh_copy(tmp_path / "clone")
    try:
        up_to_recover = lines[: lines.index(RECOVER) + 1]
        done = _shell([COPY_LINE, *up_to_recover], project)
        said = done.stdout + done.stderr
        assert "TPU VM demo-tpu in europe-west4-a is PREEMPTED" in said
        assert "TPU VM demo-tpu: node is PREEMPTED -> will be replaced" in said, said[-4000:]

        env_line = next(line for line in lines if line.startswith(". "))
        outputs = json.loads(_shell([env_line, "pulumi stack output --json --stack mystack"], project).stdout)
        node = _tpu_node(project / ".offline" / "env", "europe-west4-a", "demo-tpu")
        assert node["state"] == "READY", node
        generation = int(node["labels"]["recovery-generation"])
        assert outputs["recoveryGenerations"]["demo-tpu"] == generation, outputs
        assert outputs["lastRecoveries"]["tpuVms"]["demo-tpu"]["cause"] == "preempted", outputs

        done = _shell([env_line, *lines[lines.index(RECOVER) + 1 :]], project)
        assert "Stack 'mystack' has been removed!" in done.stdout + done.stderr
        assert not (project / ".offline" / "pid").exists(), "stop ends the stand-ins"
    finally:
        # A failed line leaves the stand-ins running: they go with the test.
        if (project / ".offline" / "pid").exists():
            script = project / "tests/support/harness/engine/offline_cloud.py"
            subprocess.run([sys.executable, str(script), "stop", str(project / ".offline")], timeout=60)
