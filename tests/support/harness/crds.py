"""The upstream schemas our Kubernetes objects are checked against, nobody on this project wrote
them: JobSet v0.12.0's and Kueue v0.19.2's own CRDs (tests/fixtures, how they were taken: the
README in each folder), read as the API server applies them, and the Kubernetes version whose
built-in schemas ``kubernetes_validate`` checks the rest against."""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any, Callable, Iterable

import jsonschema
import yaml

FIXTURES = Path(__file__).parents[2] / "fixtures"
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
def _crd_document(path: Path) -> Any:
    """A CRD file as YAML gives it, read once per process: with libyaml's safe loader (the same
    documents as ``yaml.safe_load``; Kueue's Workload CRD, 1.4 MB, takes 0.15 s instead of 1.6 s)."""
    return yaml.load(path.read_text(), Loader=yaml.CSafeLoader)


def served_schema(path: Path, version: str) -> Any:
    """The ``openAPIV3Schema`` of one served version of a CRD file. Shared by every caller in the
    process: callers must not change it."""
    (served,) = [v for v in _crd_document(path)["spec"]["versions"] if v["name"] == version]
    return served["schema"]["openAPIV3Schema"]


@functools.cache
def crd_validator(path: Path, version: str) -> jsonschema.Draft7Validator:
    """A validator for one served version of a CRD file, from its ``openAPIV3Schema``."""
    return jsonschema.Draft7Validator(_strict(served_schema(path, version)))


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


KUEUE_WORKLOAD_CRD = KUEUE_CRDS / "kueue.x-k8s.io_workloads.yaml"
_CRD_OF_KIND = {"JobSet": JOBSET_CRD, "Workload": KUEUE_WORKLOAD_CRD, **KUEUE_CRD_FILES}
"""Objects of these kinds are checked against their CRD; every other kind against Kubernetes'."""


def _schema_folder() -> Path:
    """kubernetes-validate's strict schemas for ``KUBERNETES_VERSION`` (the folder its validate()
    reads for that version, with ``strict=True``)."""
    import kubernetes_validate

    folder = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    return folder / f"v{KUBERNETES_VERSION}-local-strict"


@functools.cache
def _definitions() -> Any:
    from referencing import Resource

    return Resource.from_contents(json.loads((_schema_folder() / "_definitions.json").read_text()))


@functools.cache
def _builtin_validator(file_name: str) -> Any:
    """A validator for one schema file of ``_schema_folder()``, with the shared definitions, built
    as kubernetes_validate.validate() builds it. Built once: validate() reads and parses the 1.4 MB
    of definitions again at every call (8 ms), and the fakes check every answer they send."""
    from referencing import Registry, Resource

    path = _schema_folder() / file_name
    if not path.is_file():
        return None
    schema = json.loads(path.read_text())
    registry = _definitions() @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.Draft202012Validator(schema, registry=registry)


def _status_validator() -> Any:
    # meta/v1's Status is served as apiVersion v1, and kubernetes-validate files its schema under
    # "meta" (status-meta-v1.json), where validate() does not look: checked with that file, with
    # the shared definitions, as validate() checks the others.
    return _builtin_validator("status-meta-v1.json")


def _builtin_file(api_version: str, kind: str) -> str:
    """The schema file kubernetes_validate.validate() reads for an object: ``batch/v1`` Job is
    ``job-batch-v1.json``, ``rbac.authorization.k8s.io/v1`` is ``rbac-v1`` (its utils.validate)."""
    group_version = re.sub(r"^([^./]*)(?:[.][^/]*)?/", r"\1-", api_version)
    return f"{kind.lower()}-{group_version}.json"


def kubernetes_errors(item: Any) -> list[str]:
    """What the published schemas find wrong with an object the API server would send: a
    built-in kind (or its list) against Kubernetes' OpenAPI (kubernetes-validate, strict, at
    ``KUBERNETES_VERSION``), a ``Status`` against meta/v1's, a JobSet or Kueue object (or
    their lists' items) against its CRD. [] when it conforms."""
    if not isinstance(item, dict) or not isinstance(item.get("kind"), str):
        return [f"(top): not a Kubernetes object: {str(item)[:80]}"]
    kind = item["kind"]
    if kind == "Status":
        return sorted(
            f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
            for e in _status_validator().iter_errors(item)
        )
    base = kind.removesuffix("List")
    if base in _CRD_OF_KIND:
        if base == kind:
            return schema_errors(item, _CRD_OF_KIND[base])
        extra = sorted(set(item) - {"apiVersion", "kind", "metadata", "items"})
        errors = [f"(top): a list has no field {key!r}" for key in extra]
        for index, each in enumerate(item.get("items", [])):
            errors.extend(f"items/{index}/{error}" for error in kubernetes_errors(each))
        return errors
    validator = _builtin_validator(_builtin_file(str(item.get("apiVersion")), kind))
    if validator is None:
        return [f"(top): no published schema for {item.get('apiVersion')} {kind}"]
    # The first error, as validate() raises it.
    for error in validator.iter_errors(item):
        return [f"{'/'.join(map(str, error.absolute_path))}: {error.message}"]
    return []


class CheckedAgainstKubernetes:
    """A fake Kubernetes API server (mixed into a ``LoopbackJsonServer``) whose every JSON answer
    is checked with ``kubernetes_errors``, watch events through ``check_object``. What does not
    conform fails the test when the server closes (``BackgroundServer.off_schema_found``)."""

    off_schema_found: Callable[[str, Iterable[str]], None]  # BackgroundServer's

    def check_object(self, where: str, item: Any) -> None:
        self.off_schema_found(where, kubernetes_errors(item))

    def answered(self, http_method: str, path: str, status: int, body: Any, sent: bytes) -> None:
        if isinstance(body, dict) and "kind" in body:  # (a Google-shaped 404 has none: not ours)
            self.check_object(f"{http_method} {path} {status}", body)
