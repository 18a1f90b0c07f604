"""The searchable index and its life: opened and brought up to date in the background, awaited by calls.

The MCP handshake must not wait for torch and the model to load, so ``serving()`` only starts
the build (open the store, load the models, ingest ``RAG_DOCS_PATHS``); a call waits for it at
most ``index_ready_timeout_seconds``. A failed build is kept, and every call reports its reason
instead of hanging or pretending to be empty. Writes (the start-up ingest, ``add_documents``)
take turns.

With ``RAG_TENANT_COLLECTIONS`` a call may name a tenant: it then searches, lists and adds in that
tenant's own collections (``RagSettings.tenant_collection``), over the same Qdrant client, embedder and
reranker as the shared index, opened on first use and created by the tenant's first add.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import TypeVar

import anyio
import anyio.to_thread

from mcp_rag_tool.chunking import ChunkLimits
from mcp_rag_tool.embeddings import Embedder, MiniLMEmbedder
from mcp_rag_tool.ingest import DocumentInput, Ingester, IngestReport, ProgressListener
from mcp_rag_tool.openai_embeddings import OpenAIEmbedder
from mcp_rag_tool.page_model import PageModel, PageVectors
from mcp_rag_tool.points import SearchFilter, SearchHit, SourceRecord
from mcp_rag_tool.rerank import CrossEncoderScorer, PassageScorer
from mcp_rag_tool.retrieval import Retriever, SearchOptions
from mcp_rag_tool.settings import IN_MEMORY, RagSettings
from mcp_rag_tool.store import StoreLocked, VectorStore
from mcp_rag_tool.tokens import TokenCounter, WordPieceCounter
from suite_common.logging import get_logger

__all__ = ["DocumentIndex", "IndexUnavailable", "load_embedder"]

_log = get_logger("mcp_rag_tool.index")
_T = TypeVar("_T")

_MINILM_WINDOW = 256


class IndexUnavailable(Exception):
    """The index cannot answer (still building, its build failed, the store fails); the message says which."""


async def load_embedder(settings: RagSettings) -> Embedder:
    if settings.embedding_provider == "openai":
        _log.info("embedding_endpoint_connecting", url=settings.embedding_url, model=settings.embedding_model)
        return await OpenAIEmbedder.connect(settings)
    _log.info("embedding_model_loading")
    embedder = await MiniLMEmbedder.load(batch_size=settings.embed_batch_size, precision=settings.embed_precision)
    _log.info("embedding_model_loaded", dimension=embedder.dimension, precision=embedder.precision)
    if settings.chunk_max_tokens > _MINILM_WINDOW:
        _log.warning("chunk_longer_than_model_window", chunk_max_tokens=settings.chunk_max_tokens)
    return embedder


@dataclass
class _TenantCollection:
    """A tenant's collections, opened: searched and written like the shared index's, with their own write turn."""

    store: VectorStore
    retriever: Retriever
    ingester: Ingester
    write_lock: anyio.Lock = field(default_factory=anyio.Lock)


class DocumentIndex:
    def __init__(
        self,
        settings: RagSettings,
        *,
        embedder: Embedder | None = None,
        scorer: PassageScorer | None = None,
        counter: TokenCounter | None = None,
        open_store: Callable[[RagSettings], Awaitable[VectorStore]] = VectorStore.open,
        fall_back_to_memory: bool = True,
    ) -> None:
        self._settings = settings
        self._given_embedder = embedder
        self._given_scorer = scorer
        self._given_counter = counter
        self._open_store = open_store
        self._fall_back_to_memory = fall_back_to_memory
        self._reset()

    def _reset(self) -> None:
        self._store: VectorStore | None = None
        self._retriever: Retriever | None = None
        self._ingester: Ingester | None = None
        self._report: IngestReport | None = None
        self._chunk_count = 0
        self._failure: str | None = None
        self._done = anyio.Event()
        self._write_lock = anyio.Lock()
        self._embedder: Embedder | None = None
        self._scorer: PassageScorer | None = None
        self._pages: PageVectors | None = None
        self._limits: ChunkLimits | None = None
        self._tenants: dict[str, _TenantCollection] = {}
        self._tenants_opening = anyio.Lock()

    @property
    def status(self) -> str:
        """``"ok"`` once searchable, ``"building"`` before, ``"failed: <reason>"`` if the build failed."""
        if self._failure is not None:
            return f"failed: {self._failure}"
        return "ok" if self._report is not None else "building"

    @property
    def startup_report(self) -> IngestReport | None:
        return self._report

    @property
    def chunk_count(self) -> int:
        return self._chunk_count

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[DocumentIndex]:
        """Build the index in the background while the body runs; stop and close on exit."""
        self._reset()  # a server may be started again after it stopped (a new lifespan)
        async with AsyncExitStack() as resources, anyio.create_task_group() as tasks:
            tasks.start_soon(self._build, resources)
            try:
                yield self
            finally:
                tasks.cancel_scope.cancel()

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

    async def search(
        self,
        queries: Sequence[str],
        top_k: int,
        search_filter: SearchFilter | None = None,
        *,
        tenant: str | None = None,
    ) -> list[SearchHit]:
        """The best passages; ``tenant``: in that tenant's collection (none yet: no passages)."""
        await self.wait_ready()
        if tenant is not None:
            collection = await self._tenant_collection(tenant, create=False)
            if collection is None:
                return []
            return await self._guarded("search", collection.retriever.search(queries, top_k, search_filter))
        retriever = self._retriever
        if retriever is None:  # set before the report is; this keeps mypy sure
            raise IndexUnavailable("Document search is unavailable: the index is not open.")
        return await self._guarded("search", retriever.search(queries, top_k, search_filter))

    async def is_empty(self, *, tenant: str | None = None) -> bool:
        """Whether there is nothing to search (in ``tenant``'s collection, when given)."""
        await self.wait_ready()
        if tenant is None:
            return self._chunk_count == 0
        collection = await self._tenant_collection(tenant, create=False)
        return collection is None or await self._guarded("count", collection.store.count()) == 0

    async def sources(self, *, tenant: str | None = None) -> dict[str, SourceRecord]:
        await self.wait_ready()
        if tenant is not None:
            collection = await self._tenant_collection(tenant, create=False)
            return {} if collection is None else await self._guarded("list_sources", collection.store.sources())
        store = self._store
        if store is None:
            raise IndexUnavailable("Document search is unavailable: the index is not open.")
        return await self._guarded("list_sources", store.sources())

    async def add(
        self,
        build: Callable[[dict[str, SourceRecord]], list[DocumentInput]],
        on_progress: ProgressListener | None = None,
        *,
        tenant: str | None = None,
    ) -> IngestReport:
        """Index the documents ``build`` makes from the current records (it may refuse by raising);
        ``tenant``: into that tenant's collection, created by its first add."""
        await self.wait_ready()
        if tenant is not None:
            collection = await self._tenant_collection(tenant, create=True)
            assert collection is not None  # created when missing
            async with collection.write_lock:
                documents = build(await self._guarded("list_sources", collection.store.sources()))
                return await self._guarded("add_documents", collection.ingester.add(documents, on_progress))
        store, ingester = self._store, self._ingester
        if store is None or ingester is None:
            raise IndexUnavailable("Document search is unavailable: the index is not open.")
        async with self._write_lock:
            documents = build(await self._guarded("list_sources", store.sources()))
            report = await self._guarded("add_documents", ingester.add(documents, on_progress))
            self._chunk_count = await self._guarded("count", store.count())
            if self._pages is not None:
                await self._guarded("page_vectors", self._pages.refresh(store))
        return report

    async def _tenant_collection(self, tenant: str, *, create: bool) -> _TenantCollection | None:
        """``tenant``'s collections, opened once and kept; ``None`` when they do not exist and ``create`` is False.

        A missing collection is not remembered: another replica (on a Qdrant server) may create it.
        """
        opened = self._tenants.get(tenant)
        if opened is not None:
            return opened
        store, embedder, limits = self._store, self._embedder, self._limits
        if store is None or embedder is None or limits is None:
            raise IndexUnavailable("Document search is unavailable: the index is not open.")
        async with self._tenants_opening:
            opened = self._tenants.get(tenant)
            if opened is not None:
                return opened
            tenant_store = store.sibling(self._settings.tenant_collection(tenant))
            if not create and not await self._guarded("open_tenant_collection", tenant_store.exists()):
                return None
            created = await self._guarded(
                "open_tenant_collection", tenant_store.ensure_collections(embedder.dimension, embedder.name)
            )
            if created:
                _log.info("tenant_collection_created", tenant=tenant, collection=tenant_store.collection)
            options = SearchOptions.from_settings(self._settings)
            opened = _TenantCollection(
                store=tenant_store,
                retriever=Retriever(tenant_store, embedder, options, self._scorer),
                ingester=Ingester(tenant_store, embedder, limits, batch_size=self._settings.embed_batch_size),
            )
            self._tenants[tenant] = opened
            return opened

    async def _guarded(self, operation: str, call: Awaitable[_T]) -> _T:
        """Turn a failure of the store or the embedder into a message the model can act on."""
        try:
            return await call
        except IndexUnavailable:
            raise
        except Exception as exc:
            _log.exception("index_operation_failed", operation=operation)
            raise IndexUnavailable(
                f"Document search failed ({type(exc).__name__}: {exc}). Try again later; if it keeps failing, "
                "tell the user the document search is not working."
            ) from exc

    async def _build(self, resources: AsyncExitStack) -> None:
        try:
            store = await self._open(resources)
            embedder = self._given_embedder or await load_embedder(self._settings)
            if self._given_embedder is None:
                resources.push_async_callback(embedder.aclose)
            scorer = self._given_scorer
            if scorer is None and self._settings.rerank_model_path is not None:
                _log.info("rerank_model_loading", path=str(self._settings.rerank_model_path))
                scorer = await CrossEncoderScorer.load(self._settings.rerank_model_path)
            pages = None
            if self._settings.page_model_path is not None:
                _log.info("page_model_loading", path=str(self._settings.page_model_path))
                pages = PageVectors(await PageModel.from_folder(self._settings.page_model_path))
            counter = self._given_counter
            if counter is None:
                counter = await anyio.to_thread.run_sync(WordPieceCounter.bundled)
            if await store.ensure_collections(embedder.dimension, embedder.name):
                _log.info("collections_created", collection=store.collection, embedder=embedder.name)
            limits = ChunkLimits(self._settings.chunk_max_tokens, self._settings.chunk_overlap_tokens, counter=counter)
            ingester = Ingester(store, embedder, limits, batch_size=self._settings.embed_batch_size)
            self._embedder, self._scorer, self._limits = embedder, scorer, limits
            self._ingester = ingester
            options = SearchOptions.from_settings(self._settings)
            self._retriever = Retriever(store, embedder, options, scorer, pages)
            self._pages = pages
            async with self._write_lock:
                if self._settings.docs_paths:
                    report = await ingester.ingest_folders(self._settings.docs_paths, prune_other_folders=True)
                else:  # nothing configured: serve what the CLI (or add_documents) put in the store
                    report = IngestReport()
                self._chunk_count = await store.count()
                if pages is not None:
                    _log.info("page_vectors_computed", documents=await pages.refresh(store))
            self._report = report
        except Exception as exc:
            self._failure = f"{type(exc).__name__}: {exc}"
            _log.exception("index_build_failed")
        finally:
            self._done.set()

    async def _open(self, resources: AsyncExitStack) -> VectorStore:
        try:
            store = await self._open_store(self._settings)
        except StoreLocked as exc:
            if not self._fall_back_to_memory:
                raise
            _log.warning("qdrant_path_locked_using_memory", reason=str(exc))
            store = await self._open_store(self._settings.model_copy(update={"qdrant_path": IN_MEMORY}))
        self._store = store

        async def close() -> None:
            with anyio.CancelScope(shield=True):
                await store.close()

        resources.push_async_callback(close)
        return store
