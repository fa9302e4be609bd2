"""GKE's TPU example of flex-start with queued provisioning, quoted as published, so tests can
compare what this project declares with it flag by flag and field by field.

Source: Google Cloud documentation, "Optimize AI training on TPUs with DWS and Kueue"
(https://docs.cloud.google.com/kubernetes-engine/docs/tutorials/ray-kueue-dws, "Last updated
2026-04-10 UTC"; code samples Apache 2.0): its "DWS flex-start node pool" (Plan B) command, and
the queued-provisioning objects of its ``dws-tpu-queue.yaml``. The command's shell variables are
kept as written; the tutorial sets ``${ZONE}`` to ``us-east5-b`` and makes a zonal cluster there.
"""

DWS_NODE_POOL = """
gcloud container node-pools create ${DWS_NODEPOOL} \\
--cluster=${CLUSTER_NAME} \\
--location=${ZONE} \\
--machine-type=ct6e-standard-4t \\
--tpu-topology=4x4 \\
--reservation-affinity=none \\
--enable-autoscaling \\
--enable-queued-provisioning \\
--flex-start \\
--num-nodes=0 \\
--min-nodes=0 \\
--max-nodes=4
"""

DWS_QUEUE_OBJECTS = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: AdmissionCheck
metadata:
  name: dws-prov
spec:
  controllerName: kueue.x-k8s.io/provisioning-request
  parameters:
    apiGroup: kueue.x-k8s.io
    kind: ProvisioningRequestConfig
    name: dws-config
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ProvisioningRequestConfig
metadata:
  name: dws-config
spec:
  provisioningClassName: queued-provisioning.gke.io
  managedResources:
  - google.com/tpu
"""

DWS_WORKER_TOLERATIONS = """
- key: "google.com/tpu"
  operator: "Exists"
  effect: "NoSchedule"
- key: "cloud.google.com/gke-queued"
  operator: "Exists"
  effect: "NoSchedule"
"""
"""The tolerations of the tutorial's TPU workers (its RayJob's ``workerGroupSpecs``): "Because
DWS flex-start nodes are specially marked (tainted) by GKE so that normal workloads don't
accidentally run on them, your job must explicitly tolerate the cloud.google.com/gke-queued
taint"."""
