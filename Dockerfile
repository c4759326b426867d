# The in-cluster portal's image (docs/portal.md): this project installed from this checkout's files; nothing is
# fetched but Python packages from the package index. Name it in the InferenceGateway's
# `modelplane.ai/aggregated-api-image` annotation; the portal then starts in seconds (no install at start).
#   docker build -t <registry>/modelplane:<version> . && docker push <registry>/modelplane:<version>
FROM python:3.11-slim-bookworm
WORKDIR /src
COPY pyproject.toml README.md ./
COPY fleet fleet
COPY workloads workloads
COPY components components
COPY automation automation
COPY infra infra
RUN pip install --no-cache-dir /src && rm -rf /src
WORKDIR /
# the portal's Deployment runs as this user (workloads/aggregated_api.py)
USER 1000:1000
