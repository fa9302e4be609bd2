"""A dedicated, least-privilege service account for training workloads."""

from typing import Mapping, Optional

import pulumi
import pulumi_gcp as gcp
from pydantic import with_config
from typing_extensions import NotRequired, TypedDict

from ..domain.naming import service_account_id_problem
from ..validation import ARGUMENTS, check_arguments


@with_config(ARGUMENTS)
class TrainingServiceAccountArgs(TypedDict):
    account_id: str
    """Service account id (6-30 lowercase letters, digits, '-')."""
    buckets: Mapping[str, pulumi.Input[str]]
    """Buckets the account reads and writes objects in, keyed by a stable short name (e.g. the
    region); the key names the IAM binding, so keep it stable."""
    display_name: NotRequired[str]
    """Display name of the account (default "TPU training workloads")."""
    project: NotRequired[pulumi.Input[str]]
    """Google Cloud project; the provider's project when omitted."""


class TrainingServiceAccount(pulumi.ComponentResource):
    """A service account with object read/write on the given buckets and nothing project-wide.

    Children: ``{name}-account``, and ``{name}-{key}-objects`` per bucket.
    """

    email: pulumi.Output[str]
    """The account's email, to run VMs or Pods as."""
    member: pulumi.Output[str]
    """The account as an IAM member (``serviceAccount:EMAIL``)."""

    def __init__(
        self, name: str, args: TrainingServiceAccountArgs, opts: Optional[pulumi.ResourceOptions] = None
    ) -> None:
        problems = check_arguments("TrainingServiceAccount", name, args, TrainingServiceAccountArgs, opts)
        problems.check("account_id", service_account_id_problem(args["account_id"]))
        problems.raise_any()
        super().__init__("tpu-training:iam:TrainingServiceAccount", name, {}, opts)
        self.account = gcp.serviceaccount.Account(
            f"{name}-account",
            account_id=args["account_id"],
            display_name=args.get("display_name", "TPU training workloads"),
            project=args.get("project"),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.email = self.account.email
        self.member = self.account.member
        for key, bucket in sorted(args["buckets"].items()):
            gcp.storage.BucketIAMMember(
                f"{name}-{key}-objects",
                bucket=bucket,
                # Read, write, list and delete objects: what checkpointing needs, on this bucket only.
                role="roles/storage.objectUser",
                member=self.member,
                opts=pulumi.ResourceOptions(parent=self),
            )
        self.register_outputs({"email": self.email, "member": self.member})
