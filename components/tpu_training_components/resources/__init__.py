"""The Pulumi components (pulumi.ComponentResource); their type strings never change."""
