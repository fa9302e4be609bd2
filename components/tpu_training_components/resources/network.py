"""A custom-mode VPC that TPU VMs and private GKE nodes, which have no external IP, can work from.

Without an external IP a machine reaches Google APIs only through Private Google Access and the
internet only through Cloud NAT:

- Cloud TPU API, ``NetworkConfig.enable_external_ips``: "If set to false, the specified subnetwork
  or network should have Private Google Access enabled."
  (https://cloud.google.com/python/docs/reference/tpu/latest/google.cloud.tpu_v2.types.NetworkConfig)
  Without it a TPU VM's startup script cannot read ``gs://`` nor install packages.
- GKE private clusters: "To provide outbound internet access for your private nodes, such as to
  pull images from an external registry, use Cloud NAT to create and configure a Cloud Router."
  (https://cloud.google.com/kubernetes-engine/docs/how-to/private-clusters)
"""

import re
from typing import Optional, Sequence

import pulumi
import pulumi_gcp as gcp
from pydantic import with_config
from typing_extensions import NotRequired, TypedDict

from ..domain.cost_estimate import Priced
from ..domain.naming import bounded_name
from ..domain.network_plan import NetworkPlan, NetworkPlanError, plan_network
from ..validation import ARGUMENTS, check_arguments

_NETWORK_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
NETWORK_NAME_RULE = "1-63 lowercase letters, digits or '-', starting with a letter and not ending with '-'"

IAP_TCP_FORWARDING_RANGE = "35.235.240.0/20"
"""Where Identity-Aware Proxy TCP forwarding connects from, e.g. for
``gcloud compute tpus tpu-vm ssh --tunnel-through-iap`` to a VM without an external IP."""


@with_config(ARGUMENTS)
class TrainingNetworkArgs(TypedDict):
    network_name: str
    """Name of the VPC network (1-63 lowercase letters, digits or '-', starting with a letter and
    not ending with '-'); subnets, routers and firewall rules are named after it."""
    regions: Sequence[str]
    """Regions that get a subnet, a Cloud Router and a Cloud NAT: every region a TPU VM or GKE node
    runs in. Each region's range depends on its name only, so adding or removing a region leaves
    the others' subnets alone."""
    gke_region: NotRequired[Optional[str]]
    """Region of the stack's GKE cluster, if any: its subnet also gets the ``gke-pods`` and
    ``gke-services`` secondary ranges. Added to ``regions`` when missing there."""
    iap_ssh: NotRequired[bool]
    """Allow SSH (tcp:22) from Identity-Aware Proxy TCP forwarding (default True): the only way in
    to VMs without an external IP short of a bastion."""
    project: NotRequired[pulumi.Input[str]]
    """Google Cloud project; the provider's project when omitted."""


def _plan(name: str, args: TrainingNetworkArgs, opts: Optional[pulumi.ResourceOptions]) -> NetworkPlan:
    problems = check_arguments("TrainingNetwork", name, args, TrainingNetworkArgs, opts)
    network_name = args["network_name"]
    if not _NETWORK_NAME.fullmatch(network_name):
        problems.add("network_name", f"{network_name!r} must be {NETWORK_NAME_RULE}")
    try:
        plan = plan_network(args["regions"], args.get("gke_region"))
    except NetworkPlanError as err:
        problems.add((), str(err))  # it names the argument
    problems.raise_any()
    return plan


class TrainingNetwork(pulumi.ComponentResource):
    """A custom-mode VPC with, per region, a subnet with Private Google Access and a Cloud NAT;
    internal traffic allowed between all its ranges, and SSH through IAP.

    Children: ``{name}-vpc``; per region ``{name}-subnet-{region}``, ``{name}-router-{region}`` and
    ``{name}-nat-{region}``; ``{name}-internal``; ``{name}-iap-ssh`` unless ``iap_ssh`` is False.
    """

    network_id: pulumi.Output[str]
    """``projects/{project}/global/networks/{network_name}``."""
    network_self_link: pulumi.Output[str]
    """The network's self link, for APIs that want a URL."""
    subnetwork_ids: pulumi.Output[dict[str, str]]
    """Region -> subnetwork id."""
    pods_range_name: pulumi.Output[Optional[str]]
    """Secondary range for GKE pods on the GKE region's subnet; None without ``gke_region``."""
    services_range_name: pulumi.Output[Optional[str]]
    """Secondary range for GKE services on the GKE region's subnet; None without ``gke_region``."""

    def __init__(
        self, name: str, args: TrainingNetworkArgs, opts: Optional[pulumi.ResourceOptions] = None
    ) -> None:
        # Python-only attributes, annotated here rather than on the class: class annotations are
        # the component's outputs in the provider's schema, and these are not values other
        # languages can hold.
        self.plan: NetworkPlan = _plan(name, args, opts)
        """The address plan, known before anything is created."""
        plan = self.plan
        super().__init__("tpu-training:network:TrainingNetwork", name, {}, opts)
        network_name = args["network_name"]
        project = args.get("project")
        child = pulumi.ResourceOptions(parent=self)

        self.vpc = gcp.compute.Network(
            f"{name}-vpc",
            name=network_name,
            # Custom mode: every subnet is declared here, with a range from the plan, instead of
            # one per region in 10.128.0.0/9 that nobody asked for.
            auto_create_subnetworks=False,
            # Each region has its own router and NAT; nothing needs routes learned in another.
            routing_mode="REGIONAL",
            # The default route to the internet gateway is kept: Cloud NAT and Private Google
            # Access both send through it.
            project=project,
            opts=child,
        )

        self.priced: list[Priced] = []
        """The billable resources declared (the NAT gateways), as ``cost_estimate.estimate``
        prices them."""
        self.subnets: dict[str, gcp.compute.Subnetwork] = {}
        """Region -> subnetwork, for callers that place TPU VMs or a cluster in it."""
        for subnet_plan in plan.subnets:
            region = subnet_plan.region
            # VPC-native GKE: pods and services get alias IPs from named ranges on this subnet.
            secondary = [
                gcp.compute.SubnetworkSecondaryIpRangeArgs(range_name=range_name, ip_cidr_range=cidr)
                for range_name, cidr in plan.secondary_ranges(region)
            ]
            subnet = gcp.compute.Subnetwork(
                f"{name}-subnet-{region}",
                name=bounded_name(network_name, region),
                region=region,
                network=self.vpc.id,
                ip_cidr_range=subnet_plan.cidr,
                # TPU VMs and private nodes have no external IP: this is how they reach gs://,
                # Artifact Registry and the other Google APIs.
                private_ip_google_access=True,
                secondary_ip_ranges=secondary or None,
                project=project,
                opts=child,
            )
            self.subnets[region] = subnet

            router = gcp.compute.Router(
                f"{name}-router-{region}",
                name=bounded_name(network_name, region, "router"),
                region=region,
                network=self.vpc.id,
                project=project,
                opts=child,
            )
            self.priced.append(
                Priced("gcp:compute/routerNat:RouterNat", f"{name}-nat-{region}", {"region": region})
            )
            gcp.compute.RouterNat(
                f"{name}-nat-{region}",
                name=bounded_name(network_name, region, "nat"),
                router=router.name,
                region=region,
                # Outbound only, for pip, PyPI mirrors and registries outside Google; nothing
                # outside can connect in, so Google-managed addresses are enough.
                nat_ip_allocate_option="AUTO_ONLY",
                source_subnetwork_ip_ranges_to_nat="LIST_OF_SUBNETWORKS",
                subnetworks=[
                    gcp.compute.RouterNatSubnetworkArgs(
                        name=subnet.id,
                        # Primary and secondary ranges: GKE pods pull and download too.
                        source_ip_ranges_to_nats=["ALL_IP_RANGES"],
                    )
                ],
                # Dropped connections (port exhaustion) are the failures worth seeing.
                log_config=gcp.compute.RouterNatLogConfigArgs(enable=True, filter="ERRORS_ONLY"),
                project=project,
                opts=child,
            )

        gcp.compute.Firewall(
            f"{name}-internal",
            name=bounded_name(network_name, "internal"),
            network=self.vpc.id,
            direction="INGRESS",
            # Workers of a multi-host TPU slice talk to each other on many ports; xpk
            # (src/xpk/core/network.py) and Cluster Toolkit (examples/gke-tpu-v6e) open all internal
            # traffic the same way. A custom-mode VPC, unlike `default`, has no such rule.
            source_ranges=list(plan.internal_ranges),
            allows=[
                gcp.compute.FirewallAllowArgs(protocol="tcp", ports=["0-65535"]),
                gcp.compute.FirewallAllowArgs(protocol="udp", ports=["0-65535"]),
                gcp.compute.FirewallAllowArgs(protocol="icmp"),
            ],
            project=project,
            opts=child,
        )
        if args.get("iap_ssh", True):
            gcp.compute.Firewall(
                f"{name}-iap-ssh",
                name=bounded_name(network_name, "iap-ssh"),
                network=self.vpc.id,
                direction="INGRESS",
                # IAP TCP forwarding only: no SSH from the internet at large.
                source_ranges=[IAP_TCP_FORWARDING_RANGE],
                allows=[gcp.compute.FirewallAllowArgs(protocol="tcp", ports=["22"])],
                project=project,
                opts=child,
            )

        self.network_id = self.vpc.id
        self.network_self_link = self.vpc.self_link
        self.subnetwork_ids = pulumi.Output.all(
            **{region: subnet.id for region, subnet in self.subnets.items()}
        )
        self.pods_range_name = pulumi.Output.from_input(plan.pods_range_name)
        self.services_range_name = pulumi.Output.from_input(plan.services_range_name)
        self.register_outputs(
            {
                "network_id": self.network_id,
                "network_self_link": self.network_self_link,
                "subnetwork_ids": self.subnetwork_ids,
                "pods_range_name": self.pods_range_name,
                "services_range_name": self.services_range_name,
            }
        )
