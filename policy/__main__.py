"""The policy pack, served to the Pulumi CLI: `pulumi preview --policy-pack policy`.

The CLI runs this folder with the virtualenv PulumiPolicy.yaml names (`python -m pulumi.policy`
runs this file with this folder first on sys.path). Constructing ``PolicyPack`` starts the
analyzer's gRPC server and never returns, so this is the one place that does it; the policies
themselves live in ``tpu_training_policies``.
"""

from pulumi_policy import PolicyPack
from tpu_training_policies import PACK_NAME, POLICIES

PolicyPack(name=PACK_NAME, policies=POLICIES)
