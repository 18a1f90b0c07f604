"""The real all-MiniLM-L6-v2, loaded once for every in-process test of the RAG tool (it takes seconds)."""

from __future__ import annotations

import pytest

from mcp_rag_tool.embeddings import MiniLMEmbedder
from mcp_rag_tool.tokens import WordPieceCounter


@pytest.fixture(scope="session")
async def minilm() -> MiniLMEmbedder:
    return await MiniLMEmbedder.load()


@pytest.fixture(scope="session")
def wordpiece() -> WordPieceCounter:
    return WordPieceCounter.bundled()
