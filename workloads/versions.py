"""Pinned images of what composition adds to a replica. One place, so upgrades are one diff."""

EPP_IMAGE = "ghcr.io/llm-d/llm-d-router-endpoint-picker:v0.10.0"
ROUTING_SIDECAR_IMAGE = "ghcr.io/llm-d/llm-d-router-disagg-sidecar:v0.10.0"
HYDRATION_IMAGE = "python:3.11-slim"
HUGGINGFACE_HUB = "huggingface_hub==0.36.0"
# In-cluster Prometheus that the serving stack installs (kube-prometheus-stack, fullnameOverride prometheus).
PROMETHEUS_ADDRESS = "http://prometheus-prometheus.monitoring.svc:9090"
