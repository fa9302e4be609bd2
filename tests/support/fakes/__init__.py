"""Doubles for what cannot run here: loopback fakes of Google's and Kubernetes' APIs that the real
client libraries talk to, a stub `pulumi`, fault injection for the trainer (docs/fidelity.md)."""
