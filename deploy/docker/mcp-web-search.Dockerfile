# mcp_web_search, the web_search MCP tool over streamable HTTP (MCP at /mcp). Build from the repository root:
#   docker build -f deploy/docker/mcp-web-search.Dockerfile -t loopsuite/mcp-web-search:dev .

# The base of both stages: the official image by default; `make images` passes a stand-in built from Debian's
# packages where no container registry can be reached (deploy/docker/build_images.py).
ARG BASE_IMAGE=python:3.11-slim-bookworm

# ---- builder: a virtual environment holding the tool, loopsuite-common and their dependencies ----
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
COPY tools/mcp_web_search/pyproject.toml tools/mcp_web_search/
RUN python deploy/docker/pyproject_requirements.py \
        libs/suite_common/pyproject.toml tools/mcp_web_search/pyproject.toml > requirements.txt \
    && pip install --no-cache-dir -r requirements.txt \
    && find /opt/venv -name '*.so' -exec strip --strip-unneeded {} +

# Then the code, without resolving anything again; pip check fails the build if a dependency is missing.
# pip and setuptools then leave the environment: the service never installs anything (about 30 MB less).
COPY libs/suite_common/src libs/suite_common/src
COPY tools/mcp_web_search/src tools/mcp_web_search/src
RUN pip install --no-cache-dir --no-deps ./libs/suite_common ./tools/mcp_web_search \
    && pip check \
    && python -m pip uninstall --yes --quiet pip setuptools

# ---- runtime: the slim base, the virtual environment and an unprivileged user; no compiler, no sources ----
FROM ${BASE_IMAGE}

LABEL org.opencontainers.image.title="loopsuite mcp-web-search" \
      org.opencontainers.image.description="MCP server: web_search over streamable HTTP at /mcp"

ENV VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    WEB_SEARCH_HOST=0.0.0.0

RUN groupadd --system --gid 10001 loopsuite \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin loopsuite
COPY --from=builder /opt/venv /opt/venv
WORKDIR /app
USER 10001:10001

EXPOSE 8102
# Liveness: the process answers. Readiness (/readyz: a search backend is configured) is what compose and
# Kubernetes check before mcp-client-service connects.
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('WEB_SEARCH_PORT', '8102') + '/healthz', timeout=4)"]
ENTRYPOINT ["mcp-web-search"]
CMD ["--transport", "streamable-http"]
