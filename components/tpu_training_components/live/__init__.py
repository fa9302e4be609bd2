"""Live-state clients: the Cloud TPU, GKE and Kubernetes APIs, with their deadlines."""
