"""The searchable index and its life: built in the background, awaited (with a bound) by searches.

The MCP handshake must not wait for torch and the model to load, so ``serving()`` only starts
the build; a search waits for it at most ``index_ready_timeout_seconds``. A failed build is
kept, and every search reports its reason instead of hanging or pretending to be empty.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager

import anyio

from mcp_rag_tool.embeddings import Embedder, MiniLMEmbedder
from mcp_rag_tool.ingest import IngestReport, ingest
from mcp_rag_tool.search import SearchHit, merge_hits
from mcp_rag_tool.settings import RagSettings
from mcp_rag_tool.store import VectorStore
from suite_common.logging import get_logger

__all__ = ["DocumentIndex", "IndexUnavailable"]

_log = get_logger("mcp_rag_tool.index")


class IndexUnavailable(Exception):
    """The index cannot answer (still building, or its build failed); the message says which."""


class DocumentIndex:
    def __init__(
        self,
        settings: RagSettings,
        *,
        embedder: Embedder | None = None,
        store_factory: Callable[[RagSettings], VectorStore] = VectorStore.from_settings,
    ) -> None:
        self._settings = settings
        self._embedder = embedder
        self._store_factory = store_factory
        self._store: VectorStore | None = None
        self._report: IngestReport | None = None
        self._failure: str | None = None
        self._done = anyio.Event()

    @property
    def status(self) -> str:
        """``"ok"`` once searchable, ``"building"`` before, ``"failed: <reason>"`` if the build failed."""
        if self._failure is not None:
            return f"failed: {self._failure}"
        return "ok" if self._report is not None else "building"

    @property
    def report(self) -> IngestReport | None:
        return self._report

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[DocumentIndex]:
        """Build the index in the background while the body runs; stop and close on exit."""
        # A server may be started again after it stopped (a new lifespan): start from scratch.
        self._store, self._report, self._failure, self._done = None, None, None, anyio.Event()
        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(self._build)
                try:
                    yield self
                finally:
                    tasks.cancel_scope.cancel()
        finally:
            if self._store is not None:
                with anyio.CancelScope(shield=True):
                    await self._store.close()

    async def wait_ready(self) -> IngestReport:
        with anyio.move_on_after(self._settings.index_ready_timeout_seconds):
            await self._done.wait()
        if self._failure is not None:
            raise IndexUnavailable(f"Document search is unavailable: building the index failed ({self._failure}).")
        if self._report is None:
            raise IndexUnavailable(
                "The document index is still being built (the embedding model is loading or documents are "
                "being indexed). Try the same call again in a little while."
            )
        return self._report

    async def search(self, queries: Sequence[str], top_k: int) -> list[SearchHit]:
        """The ``top_k`` chunks closest to any of ``queries``, each with its best score."""
        await self.wait_ready()
        embedder, store = self._embedder, self._store
        if embedder is None or store is None:  # both are set before the report is; this keeps mypy sure
            raise IndexUnavailable("Document search is unavailable: the index is not open.")
        vectors = await embedder.embed(list(queries))
        hits_per_query = [await store.search(vector, top_k) for vector in vectors]
        return merge_hits(hits_per_query, top_k)

    async def _build(self) -> None:
        try:
            self._store = self._store_factory(self._settings)
            if self._embedder is None:
                _log.info("embedding_model_loading")
                self._embedder = await MiniLMEmbedder.load(batch_size=self._settings.embed_batch_size)
                _log.info("embedding_model_loaded", dimension=self._embedder.dimension)
            self._report = await ingest(self._settings, self._embedder, self._store)
        except Exception as exc:
            self._failure = f"{type(exc).__name__}: {exc}"
            _log.exception("index_build_failed")
        finally:
            self._done.set()
