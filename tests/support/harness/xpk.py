"""What xpk 1.16.0, Google's own tool for TPU training on GKE, prints in its ``--dry-run`` output
for the TPU shapes we declare (tests/fixtures/xpk-1.16.0, how it was made: the README there)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

XPK = Path(__file__).parents[2] / "fixtures" / "xpk-1.16.0"


def xpk_jobset(fixture: str) -> dict[str, Any]:
    """The JobSet of one `workload create` run: the YAML of the temp file xpk applies."""
    lines = (XPK / fixture).read_text().splitlines()
    documents = []
    for index, line in enumerate(lines):
        if line.startswith("[XPK] Temp file (") and line.rstrip().endswith("content:"):
            body = []
            for following in lines[index + 1 :]:
                if following.startswith("[XPK]"):
                    break
                body.append(following)
            documents.append(yaml.safe_load("\n".join(body)))
    (jobset,) = [d for d in documents if isinstance(d, dict) and d.get("kind") == "JobSet"]
    return jobset
