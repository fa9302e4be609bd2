"""Which stack a deployment belongs to, so that a renamed stack is refused before it re-names
everything. Pure Python with no Pulumi import.

The stack's name is part of most physical names (checkpoint buckets, service accounts, the
network, the ``pulumi-stack`` label). `pulumi stack rename` keeps the state and the outputs but
not those names: the next `pulumi up` would replace every bucket, account and VM under a new name,
and with them every running training. So each update exports where it was deployed
(``DEPLOYED_AS_OUTPUT``), and the next one compares that with where it runs now, reading the
stack's last outputs before it declares anything.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

DEPLOYED_AS_OUTPUT = "deployedAs"
"""Stack output ``{"project": ..., "stack": ...}``: the project and stack of the last update."""


def deployed_as(project: str, stack: str) -> dict[str, str]:
    """The value of ``DEPLOYED_AS_OUTPUT`` for an update of ``project``/``stack``."""
    return {"project": project, "stack": stack}


def rename_problem(previous_outputs: Optional[Mapping[str, Any]], project: str, stack: str) -> Optional[str]:
    """Why this update must not run, if the stack's last update was made under another project or
    stack name; None when it was made under this one, or nothing says where (a new stack, or one
    last updated before the output existed)."""
    previous = (previous_outputs or {}).get(DEPLOYED_AS_OUTPUT)
    if not isinstance(previous, Mapping):
        return None
    was_project, was_stack = previous.get("project"), previous.get("stack")
    if (was_project, was_stack) == (project, stack) or not isinstance(was_stack, str):
        return None
    was = f"{was_project}/{was_stack}" if was_project != project else was_stack
    now = f"{project}/{stack}" if was_project != project else stack
    return (
        f"this stack was last deployed as {was!r} and is now {now!r}: a renamed stack would re-name, "
        f"and so replace, every resource whose name holds the stack's (checkpoint buckets, service "
        f"accounts, the network, TPU VMs) and every training running on them. Rename it back with "
        f"`pulumi stack rename {was}`; a stack under a new name is a new stack: after renaming this "
        f"one back, make it with `pulumi stack init {stack}`"
    )
