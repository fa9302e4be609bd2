"""Seed 002's commands and manifests, quoted as published (Google Cloud documentation, "Run a
small batch workload with TPUs and flex-start provisioning mode", CC BY 4.0 / Apache 2.0), so
tests can compare what this project declares against them flag by flag and field by field."""

SINGLE_HOST_NODE_POOL = """
gcloud container node-pools create NODE_POOL_NAME \\
    --cluster=CLUSTER_NAME \\
    --location=LOCATION_NAME \\
    --node-locations=NODE_ZONES \\
    --machine-type=MACHINE_TYPE \\
    --reservation-affinity=none \\
    --enable-autoscaling \\
    --flex-start \\
    --num-nodes 0 \\
    --min-nodes=0 \\
    --max-nodes=1
"""

MULTI_HOST_NODE_POOL = """
gcloud container node-pools create NODE_POOL_NAME \\
    --cluster=CLUSTER_NAME \\
    --location=LOCATION_NAME \\
    --node-locations=NODE_ZONES \\
    --machine-type=MACHINE_TYPE \\
    --tpu-topology=TPU_TOPOLOGY \\
    --flex-start \\
    --enable-autoscaling \\
    --num-nodes=0 \\
    --max-nodes=2 \\
    --reservation-affinity=none \\
    --no-enable-autorepair
"""

SINGLE_HOST_JOB = """
apiVersion: batch/v1
kind: Job
metadata:
  name: job-1
spec:
  template:
    spec:
      nodeSelector:
        cloud.google.com/gke-flex-start: "true"
        cloud.google.com/gke-tpu-accelerator: ACCELERATOR_TYPE
        cloud.google.com/gke-tpu-topology: TPU_TOPOLOGY
      containers:
      - name: container-1
        image: gcr.io/k8s-staging-perf-tests/sleep:latest
        args: ["3600s"] # Sleep for 1 hour
        resources:
          requests:
              google.com/tpu: NUM_CHIPS
          limits:
              google.com/tpu: NUM_CHIPS
      restartPolicy: OnFailure
"""

MULTI_HOST_JOB = """
apiVersion: v1
kind: Service
metadata:
  name: headless-svc
spec:
  clusterIP: None
  selector:
    job-name: job-1
---
apiVersion: batch/v1
kind: Job
metadata:
  name: job-1
spec:
  backoffLimit: 0
  completions: 2
  parallelism: 2
  completionMode: Indexed
  template:
    spec:
      subdomain: headless-svc
      restartPolicy: Never
      nodeSelector:
          cloud.google.com/gke-flex-start: "true"
          cloud.google.com/gke-tpu-accelerator: ACCELERATOR_TYPE
          cloud.google.com/gke-tpu-topology: TPU_TOPOLOGY
      containers:
      - name: tpu-job
        image: us-docker.pkg.dev/cloud-tpu-images/jax-ai-image/tpu:latest
        ports:
        - containerPort: 8471 # Default port using which TPU VMs communicate
        - containerPort: 8431 # Port to export TPU runtime metrics, if supported.
        securityContext:
          privileged: true
        command:
        - bash
        - -c
        - |
          python -c 'import jax; print("TPU cores:", jax.device_count())'
        resources:
          requests:
            google.com/tpu: NUM_CHIPS
          limits:
            google.com/tpu: NUM_CHIPS
"""
