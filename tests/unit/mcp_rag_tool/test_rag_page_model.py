"""The page model (RAG_PAGE_MODEL_PATH): one vector per document from a second sentence-transformers model,
ranked beside the document vectors.

The model here is a real one: the bundled all-MiniLM-L6-v2's folder, loaded through the page model's
own code path (any sentence-transformers folder loads the same way as all-mpnet-base-v2). The chunks
are embedded by the word-hash fake, so whatever finds the paraphrased page is the page model.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
from unit.mcp_rag_tool.rag_fakes import WordHashEmbedder, memory_settings

from mcp_rag_tool.chunking import ChunkLimits
from mcp_rag_tool.ingest import API_ORIGIN, DocumentInput, Ingester
from mcp_rag_tool.page_model import PageModel, PageVectors, page_text, unpack_parts
from mcp_rag_tool.points import SearchFilter
from mcp_rag_tool.retrieval import Retriever, SearchOptions
from mcp_rag_tool.store import VectorStore
from mcp_rag_tool.tokens import WordCounter, bundled_model_path

pytestmark = pytest.mark.anyio

LIMITS = ChunkLimits(60, 0, counter=WordCounter())
PAGES = {
    "sql-createschema.md": (
        "CREATE SCHEMA",
        "A schema is essentially a namespace: it contains named objects such as tables, data types and "
        "functions, whose names may duplicate those of other objects in other schemas.",
    ),
    "sql-createview.md": (
        "CREATE VIEW",
        "Define a view of a query. The view is not physically materialized; instead, the query is run every "
        "time the view is referenced in a query.",
    ),
    "sql-createtablespace.md": (
        "CREATE TABLESPACE",
        "A tablespace allows superusers to define an alternative location on the file system where the data "
        "files containing database objects can reside.",
    ),
}


def _document(source: str, title: str, body: str, *, tags: Sequence[str] = ()) -> DocumentInput:
    return DocumentInput(source, "markdown", f"# {title}\n\n{body}".encode(), API_ORIGIN, tags=tuple(tags))


@pytest.fixture(scope="module")
def page_model() -> PageModel:
    # Loaded once for the module on this thread: anyio.run here fails when another test's event loop runs in it.
    return PageModel.load_here(bundled_model_path())


@pytest.fixture
async def store() -> AsyncIterator[VectorStore]:
    embedder = WordHashEmbedder()
    opened = await VectorStore.open(memory_settings())
    try:
        await opened.ensure_collections(embedder.dimension, embedder.name)
        documents = [
            _document(source, title, body, tags=("ddl",) if "view" in source else ())
            for source, (title, body) in PAGES.items()
        ]
        await Ingester(opened, embedder, LIMITS).add(documents)
        yield opened
    finally:
        await opened.close()


async def test_a_paraphrase_finds_its_page_by_the_page_vectors(store: VectorStore, page_model: PageModel) -> None:
    pages = PageVectors(page_model)
    assert await pages.refresh(store) == 3

    ranked = await pages.rank(
        ["a stored query that is run whenever it is referenced", "where on disk the data files live"],
        2,
        SearchFilter(),
    )

    assert [ranking[0] for ranking in ranked] == ["sql-createview.md", "sql-createtablespace.md"]
    assert all(len(ranking) == 2 for ranking in ranked)


async def test_refresh_embeds_only_changed_pages_and_forgets_removed_ones(
    store: VectorStore, page_model: PageModel
) -> None:
    pages = PageVectors(page_model)
    await pages.refresh(store)
    assert await pages.refresh(store) == 0  # nothing changed: nothing embedded again

    ingester = Ingester(store, WordHashEmbedder(), LIMITS)
    await ingester.add([_document("sql-createview.md", "CREATE VIEW", "Stored queries, as a named virtual table.")])
    assert await pages.refresh(store) == 1
    await store.remove_documents([(await store.sources())["sql-createschema.md"]])
    assert await pages.refresh(store) == 0

    ranked = await pages.rank(["a namespace that groups tables"], 10, SearchFilter())
    assert sorted(ranked[0]) == ["sql-createtablespace.md", "sql-createview.md"]


async def test_page_ranking_applies_the_search_filter(store: VectorStore, page_model: PageModel) -> None:
    pages = PageVectors(page_model)
    await pages.refresh(store)

    ranked = await pages.rank(["a namespace that groups tables"], 10, SearchFilter(tags=("ddl",)))

    assert ranked == [["sql-createview.md"]]


class RecordingRanker:
    """Ranks the tablespace page first whatever the query, and remembers what it was asked."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], int, SearchFilter]] = []

    async def rank(self, queries: Sequence[str], limit: int, search_filter: SearchFilter) -> list[list[str]]:
        self.calls.append((list(queries), limit, search_filter))
        return [["sql-createtablespace.md", "sql-createview.md", "sql-createschema.md"] for _ in queries]


async def test_the_retriever_fuses_the_page_ranking_with_the_document_rankings(store: VectorStore) -> None:
    embedder = WordHashEmbedder()
    options = SearchOptions(candidates=10)
    query = ["schema namespace tables"]
    without = {hit.source: hit.score for hit in await Retriever(store, embedder, options).search(query, 3)}
    ranker = RecordingRanker()

    hits = await Retriever(store, embedder, options, pages=ranker).search(query, 3)

    fused = {hit.source: hit.score for hit in hits}
    assert max(without, key=lambda source: without[source]) == "sql-createschema.md"  # the words match there
    # the page ranking puts the tablespace page first and the schema page last: their scores follow it
    assert fused["sql-createtablespace.md"] > without["sql-createtablespace.md"]
    assert fused["sql-createschema.md"] < without["sql-createschema.md"]
    assert ranker.calls == [(query, 10, SearchFilter())]


async def test_without_document_rankings_the_page_model_is_not_run(store: VectorStore) -> None:
    ranker = RecordingRanker()
    retriever = Retriever(store, WordHashEmbedder(), SearchOptions(document_weight=0), pages=ranker)

    assert await retriever.search(["schema namespace"], 3)
    assert ranker.calls == []


def test_unpack_parts_assembles_the_model_folder_from_the_split_zip(tmp_path: Path) -> None:
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("all-mpnet-base-v2/modules.json", json.dumps([{"idx": 0, "type": "Transformer"}]))
        zipped.writestr("all-mpnet-base-v2/1_Pooling/config.json", "{}")
        zipped.writestr("all-mpnet-base-v2/desktop.ini", "[.ShellClassInfo]")
    data = archive.getvalue()
    pieces = [data[:100], data[100:250], data[250:]]  # as the packages split it: byte ranges of one zip

    folder = unpack_parts(tmp_path, pieces)

    assert folder == tmp_path / "all-mpnet-base-v2"
    assert json.loads((folder / "modules.json").read_text())[0]["type"] == "Transformer"
    assert (folder / "1_Pooling" / "config.json").is_file()
    assert not (folder / "desktop.ini").exists()


def test_page_text_is_the_title_then_the_passages_in_order_and_bounded() -> None:
    text = page_text("CREATE VIEW", ["Define a view.", "", "Parameters follow." * 500])

    assert text.startswith("CREATE VIEW\nDefine a view.\nParameters follow.")
    assert len(text) == 4000
