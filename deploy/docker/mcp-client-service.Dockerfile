# mcp-client-service. Build from the repository root (compose does):
#   docker build -f deploy/docker/mcp-client-service.Dockerfile -t loopsuite/mcp-client-service:dev .
# In containers the tool servers are their own containers, reached over streamable HTTP ("url" entries of
# the servers file); a stdio entry ("command") needs its executable in this image, which has none.

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
COPY services/mcp_client_service/pyproject.toml services/mcp_client_service/
RUN python deploy/docker/pyproject_requirements.py \
        libs/suite_common/pyproject.toml services/mcp_client_service/pyproject.toml > requirements.txt \
    && pip install --no-cache-dir -r requirements.txt --no-compile \
    && find /opt/venv -name '*.so' -exec strip --strip-unneeded {} +

# Then the code, without resolving anything again; pip check fails the build if a dependency is missing.
# pip and setuptools then leave the environment: the service never installs anything (about 30 MB less).
# Bytecode only for what the service imports to start and serve (its import graph, written by importing it):
# compiling every installed module would add about 35 MB (SQLAlchemy's and Alembic's test kits, dialects it never
# loads, the MCP SDK's server side), and a module imported later on is compiled in memory once per process.
COPY libs/suite_common/src libs/suite_common/src
COPY services/mcp_client_service/src services/mcp_client_service/src
RUN pip install --no-cache-dir --no-deps --no-compile ./libs/suite_common ./services/mcp_client_service \
    && pip check \
    && python -m pip uninstall --yes --quiet pip setuptools \
    && PYTHONDONTWRITEBYTECODE='' python -c "import mcp_client_service.__main__, mcp_client_service.app, \
sqlalchemy.dialects.postgresql.asyncpg, sqlalchemy.dialects.sqlite, \
mcp.client.streamable_http, mcp.client.sse, uvicorn.loops.uvloop, uvicorn.protocols.http.httptools_impl"

# ---- runtime: the slim base, the virtual environment and an unprivileged user; no compiler, no sources ----
FROM ${BASE_IMAGE}

LABEL org.opencontainers.image.title="loopsuite mcp-client-service" \
      org.opencontainers.image.description="The tool registry over many MCP servers: /mcp/v1/tools/list-tools and call-tool"

ENV VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    MCP_CLIENT_HOST=0.0.0.0

RUN groupadd --system --gid 10001 loopsuite \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin loopsuite
COPY --from=builder /opt/venv /opt/venv
WORKDIR /app
USER 10001:10001

EXPOSE 8002
# Liveness: the process answers. Readiness (/readyz) also says whether every MCP server is connected,
# which is what compose waits for before starting agent-service.
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('MCP_CLIENT_PORT', '8002') + '/healthz', timeout=4)"]
CMD ["mcp-client-service"]
