"""Settings of the RAG tool, read once at start-up from ``RAG_*`` environment variables."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

from pydantic import BeforeValidator, Field, field_validator, model_validator
from pydantic_settings import NoDecode, SettingsConfigDict

from suite_common.settings import ServiceSettings, blank_as_none

__all__ = ["RagSettings"]


class RagSettings(ServiceSettings):
    """Which documents the tool indexes, where the vectors live, and how text is cut into chunks.

    Every field is an environment variable: ``RAG_DOCS_PATHS``, ``RAG_QDRANT_PATH``, ``RAG_PORT`` ...
    """

    model_config = SettingsConfigDict(env_prefix="RAG_", extra="ignore")

    port: int = Field(default=8101, description="Port of the streamable HTTP transport (MCP at /mcp).")

    docs_paths: Annotated[list[Path], NoDecode] = Field(
        default_factory=lambda: [Path("docs")],
        description=(
            "Files or folders to index; folders are walked recursively for .md, .markdown and .txt files "
            "(hidden files and folders are skipped). From the environment: a comma-separated list "
            "(RAG_DOCS_PATHS=docs,notes/faq.md) or a JSON array."
        ),
    )
    qdrant_path: Annotated[str | None, BeforeValidator(blank_as_none)] = Field(
        default=None,
        description=(
            "Unset or empty: Qdrant local mode in memory (the index is rebuilt at every start). "
            "A folder: Qdrant local mode persisted there (one process at a time may open it)."
        ),
    )
    qdrant_url: Annotated[str | None, BeforeValidator(blank_as_none)] = Field(
        default=None,
        description="URL of a Qdrant server (e.g. http://qdrant:6333) instead of local mode; same code path.",
    )
    qdrant_timeout_seconds: int = Field(
        default=10, ge=1, description="Timeout of one request to a Qdrant server, in seconds."
    )
    collection: str = Field(default="documents", min_length=1, description="Name of the Qdrant collection.")
    chunk_max_words: int = Field(
        default=180,
        ge=20,
        description=(
            "A chunk holds at most this many words (about 1.3 tokens each; all-MiniLM-L6-v2 reads 256 tokens)."
        ),
    )
    chunk_overlap_words: int = Field(
        default=30,
        ge=0,
        description="Words repeated from the end of a chunk at the start of the next one in the same section.",
    )
    embed_batch_size: int = Field(default=32, ge=1, description="Chunks embedded (and upserted) per batch.")
    index_ready_timeout_seconds: float = Field(
        default=120,
        gt=0,
        description=(
            "How long a search waits for the index to be built (model load + ingest) before it answers "
            "with an error asking to retry."
        ),
    )

    @field_validator("docs_paths", mode="before")
    @classmethod
    def _split_path_list(cls, value: object) -> object:
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                return json.loads(text)
            return [part.strip() for part in text.split(",") if part.strip()]
        return value

    @model_validator(mode="after")
    def _check_consistency(self) -> RagSettings:
        if self.qdrant_path is not None and self.qdrant_url is not None:
            raise ValueError("set RAG_QDRANT_PATH (local mode) or RAG_QDRANT_URL (a server), not both")
        if self.chunk_overlap_words >= self.chunk_max_words:
            raise ValueError("chunk_overlap_words must be smaller than chunk_max_words")
        return self
