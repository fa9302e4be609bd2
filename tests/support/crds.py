"""The upstream schemas our Kubernetes objects are checked against, nobody on this project wrote
them: JobSet v0.12.0's and Kueue v0.19.2's own CRDs (tests/fixtures, how they were taken: the
README in each folder), read as the API server applies them, and the Kubernetes version whose
built-in schemas ``kubernetes_validate`` checks the rest against."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import jsonschema
import yaml

FIXTURES = Path(__file__).parent.parent / "fixtures"
JOBSET_CRD = FIXTURES / "jobset-v0.12.0" / "jobset.x-k8s.io_jobsets.yaml"
KUEUE_CRDS = FIXTURES / "kueue-v0.19.2"
KUEUE_CRD_FILES = {
    "ResourceFlavor": KUEUE_CRDS / "kueue.x-k8s.io_resourceflavors.yaml",
    "ProvisioningRequestConfig": KUEUE_CRDS / "kueue.x-k8s.io_provisioningrequestconfigs.yaml",
    "AdmissionCheck": KUEUE_CRDS / "kueue.x-k8s.io_admissionchecks.yaml",
    "ClusterQueue": KUEUE_CRDS / "kueue.x-k8s.io_clusterqueues.yaml",
    "LocalQueue": KUEUE_CRDS / "kueue.x-k8s.io_localqueues.yaml",
}
"""The CRD of each kind of Kueue object a queued node pool declares."""
KUBERNETES_VERSION = "1.33.0"
"""The Kubernetes version whose schemas ``kubernetes_validate`` checks built-in objects against:
the oldest that runs TPU flex-start (GKE 1.33.0-gke.1712000)."""

# The Pulumi types these objects are registered as.
JOBSET_TYPE = "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet"
KUEUE = "kubernetes:kueue.x-k8s.io/v1beta2:"
"""The prefix of every Kueue object's type."""
RELEASE = "kubernetes:helm.sh/v3:Release"


def _strict(schema: Any) -> Any:
    """The schema as the API server applies it with strict field validation: an unknown field is an
    error, not silently pruned (which would drop a misspelt field without a word). Patterns are
    Go's RE2, which takes a flag group after ``^`` (Kueue's ``^(?i)[a-z]...``); Python's ``re``
    wants global flags first, and means the same with them there."""
    if isinstance(schema, dict):
        schema = {key: _strict(value) for key, value in schema.items()}
        pattern = schema.get("pattern")
        if isinstance(pattern, str) and pattern.startswith("^(?i)"):
            schema["pattern"] = "(?i)^" + pattern[len("^(?i)") :]
        if (
            "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    return schema


@functools.cache
def crd_validator(path: Path, version: str) -> jsonschema.Draft7Validator:
    """A validator for one served version of a CRD file, from its ``openAPIV3Schema``."""
    crd = yaml.safe_load(path.read_text())
    (served,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    return jsonschema.Draft7Validator(_strict(served["schema"]["openAPIV3Schema"]))


def schema_errors(manifest: dict[str, Any], path: Path = JOBSET_CRD) -> list[str]:
    """What the CRD at ``path`` finds wrong with ``manifest``, one line per error, sorted."""
    version = manifest["apiVersion"].split("/")[1]
    errors = crd_validator(path, version).iter_errors(manifest)
    return sorted(f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors)


def kueue_objects(run: Any) -> list[dict[str, Any]]:
    """Every Kueue object the run declares, as applied."""
    return [
        {key: r.inputs[key] for key in ("apiVersion", "kind", "metadata", "spec")}
        for r in run.registrations
        if r.type.startswith(KUEUE)
    ]
