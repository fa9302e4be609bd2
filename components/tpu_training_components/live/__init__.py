"""Live-state clients: the Cloud TPU, GKE, Kubernetes, Cloud Storage, Service Usage and Resource
Manager APIs, with their deadlines."""
