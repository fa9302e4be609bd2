"""TPU VMs: private, with their own identity and the recovery label."""

from __future__ import annotations

from tpu_training_components.domain.recovery import GENERATION_LABEL

from .resources import (
    WHOLE_NUMBER,
    Resource,
    Violations,
    at,
    is_default_account,
    items,
)


def no_external_ip(vm: Resource, violation: Violations) -> None:
    configs = [("networkConfig", vm.at("networkConfig"))]
    configs += [(f"networkConfigs[{i}]", c) for i, c in enumerate(items(vm.at("networkConfigs")))]
    for where, config in configs:
        if at(config, "enableExternalIps") is True:
            violation(f"{where}.enableExternalIps", True, "false (reach the internet through Cloud NAT)")


def vm_service_account(vm: Resource, violation: Violations) -> None:
    email = vm.at("serviceAccount", "email")
    if is_default_account(email):
        violation("serviceAccount.email", email, "a dedicated service account, not the default compute one")


def recovery_label(vm: Resource, violation: Violations) -> None:
    generation = vm.at("labels", GENERATION_LABEL)
    if not (isinstance(generation, str) and WHOLE_NUMBER.match(generation)):
        violation(f"labels.{GENERATION_LABEL}", generation, "a whole number, the VM's recovery generation")
