"""Shared test fakes and helpers: loopback stand-ins for the Cloud TPU, GKE and Kubernetes APIs
and for Cloud Storage (the trainer's gs:// tests), the engine's gRPC side, a stub `pulumi`
executable, the policy pack's own environment, and the published commands and manifests of
Google's flex-start page that tests compare against."""
