"""Which TPU software versions (a TPU VM's ``runtimeVersion``) go with which TPU generation.

Pure Python with no Pulumi import. Read on 2026-11-26 from Google's "TPU software versions"
(https://cloud.google.com/tpu/docs/runtimes): for PyTorch and JAX, "Trillium (v6e):
v2-alpha-tpuv6e; v5p: v2-alpha-tpuv5; v5e: v2-alpha-tpuv5-lite; v4 and older: tpu-ubuntu2204-base";
TensorFlow versions are named ``tpu-vm-tf-x.y.z[-pod][-pjrt]``, ``-pod`` for multi-host slices.
The older v4-only names start with ``tpu-vm-v4-``.

A version whose name says its generation is an error on another generation (the VM would not
boot a runtime for other chips). Other mismatches are warnings: Google adds versions, and the
zone's own list (``gcloud compute tpus tpu-vm versions list``, or ``tpu-training preflight``)
is the authority.
"""

from __future__ import annotations

from typing import Optional

SOURCE = "Google's TPU software versions page, https://cloud.google.com/tpu/docs/runtimes"

# Versions named for the generations they run on.
FOR_GENERATIONS: dict[str, frozenset[str]] = {
    "v2-alpha-tpuv6e": frozenset({"v6e"}),
    "v2-alpha-tpuv5": frozenset({"v5p"}),
    "v2-alpha-tpuv5-lite": frozenset({"v5e"}),
}
_V4_PREFIX = "tpu-vm-v4-"
OLDER_GENERATIONS = frozenset({"v2", "v3", "v4"})
"""What Google's page calls "v4 and older", the generations ``tpu-ubuntu2204-base`` is for."""
RECOMMENDED: dict[str, str] = {
    "v2": "tpu-ubuntu2204-base",
    "v3": "tpu-ubuntu2204-base",
    "v4": "tpu-ubuntu2204-base",
    "v5e": "v2-alpha-tpuv5-lite",
    "v5p": "v2-alpha-tpuv5",
    "v6e": "v2-alpha-tpuv6e",
}
"""The page's PyTorch and JAX version for each generation."""


def _suggestion(generation: str) -> str:
    recommended = RECOMMENDED.get(generation)
    return f"; for JAX or PyTorch on {generation} use {recommended!r}" if recommended else ""


def runtime_version_problem(version: str, generation: str) -> Optional[str]:
    """Why ``version`` cannot run on TPU ``generation``, or None: a version named for another
    generation."""
    named_for = FOR_GENERATIONS.get(version)
    if version.startswith(_V4_PREFIX):
        named_for = frozenset({"v4"})
    if named_for is None or generation in named_for:
        return None
    return (
        f"{version!r} is the TPU software version for TPU {', '.join(sorted(named_for))}, not "
        f"{generation} ({SOURCE}){_suggestion(generation)}"
    )


def runtime_version_warning(version: str, generation: str, *, multi_host: bool) -> Optional[str]:
    """Why ``version`` may not run on ``generation``, or None: a version the page gives only to
    v4 and older on a newer generation, or a TensorFlow version for the other kind of slice."""
    if version == "tpu-ubuntu2204-base" and generation not in OLDER_GENERATIONS:
        return (
            f"{version!r} is the TPU software version Google lists for v4 and older, not "
            f"{generation} ({SOURCE}){_suggestion(generation)}"
        )
    if version.startswith("tpu-vm-tf-"):
        pod = "-pod" in version
        if pod and not multi_host:
            return (
                f"{version!r} is a TensorFlow version for multi-host slices (-pod), and this TPU is a "
                f"single host"
            )
        if multi_host and not pod:
            return (
                f"{version!r} is a TensorFlow version for one host; a multi-host slice takes its -pod version"
            )
        if generation not in OLDER_GENERATIONS:
            return (
                f"{version!r} is a TensorFlow version; make sure the zone offers it for TPU {generation} "
                f"(`gcloud compute tpus tpu-vm versions list --zone=ZONE`, or tpu-training preflight)"
                f"{_suggestion(generation)}"
            )
    return None
