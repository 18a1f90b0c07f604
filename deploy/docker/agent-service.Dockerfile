# agent-service. Build from the repository root (compose does):
#   docker build -f deploy/docker/agent-service.Dockerfile -t loopsuite/agent-service:dev .

# The base of both stages: the official image by default; `make images` passes a stand-in built from Debian's
# packages where no container registry can be reached (deploy/docker/build_images.py).
ARG BASE_IMAGE=python:3.11-slim-bookworm

# ---- builder: a virtual environment holding the service, loopsuite-common and their dependencies ----
FROM ${BASE_IMAGE} AS builder

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH
# strip, to drop the debugging symbols some wheels ship in their extension modules (uvloop's alone is 12 MB).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends binutils \
    && rm -rf /var/lib/apt/lists/*
# A known pip rather than the one the base image bundles: every build resolves (extras included) the same way.
RUN python -m venv /opt/venv \
    && pip install --no-cache-dir --upgrade pip==26.3
WORKDIR /src

# Dependencies first, from the pyproject files alone: a source edit keeps this layer cached.
COPY deploy/docker/pyproject_requirements.py deploy/docker/
COPY libs/suite_common/pyproject.toml libs/suite_common/
COPY services/agent_service/pyproject.toml services/agent_service/
RUN python deploy/docker/pyproject_requirements.py \
        libs/suite_common/pyproject.toml services/agent_service/pyproject.toml > requirements.txt \
    && pip install --no-cache-dir -r requirements.txt \
    && find /opt/venv -name '*.so' -exec strip --strip-unneeded {} +

# Then the code, without resolving anything again; pip check fails the build if a dependency is missing.
# pip and setuptools then leave the environment: the service never installs anything (about 30 MB less).
COPY libs/suite_common/src libs/suite_common/src
COPY services/agent_service/src services/agent_service/src
RUN pip install --no-cache-dir --no-deps ./libs/suite_common ./services/agent_service \
    && pip check \
    && python -m pip uninstall --yes --quiet pip setuptools

# ---- runtime: the slim base, the virtual environment and an unprivileged user; no compiler, no sources ----
FROM ${BASE_IMAGE}

LABEL org.opencontainers.image.title="loopsuite agent-service" \
      org.opencontainers.image.description="The agent loop as a service: POST /api/v1/agent/run"

ENV VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    AGENT_HOST=0.0.0.0

# /app/.data: where runs are stored by default (AGENT_DATABASE_URL=sqlite:///.data/agent.db, one replica)
# when the container's filesystem is writable; compose and Kubernetes point at PostgreSQL instead.
RUN groupadd --system --gid 10001 loopsuite \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin loopsuite \
    && install -d -o 10001 -g 10001 /app/.data
COPY --from=builder /opt/venv /opt/venv
WORKDIR /app
USER 10001:10001

EXPOSE 8000
# Liveness: the process answers. Readiness (/readyz) also asks completion-service and mcp-client-service;
# compose checks that instead, so that `docker compose up --wait` returns once a run can succeed.
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('AGENT_PORT', '8000') + '/healthz', timeout=4)"]
CMD ["agent-service"]
