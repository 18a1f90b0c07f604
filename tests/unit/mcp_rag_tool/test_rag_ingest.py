"""Incremental ingest into a real (in-memory) Qdrant: unchanged skipped, changed replaced, deleted removed."""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection
from pathlib import Path

import anyio
import pytest
from structlog.testing import capture_logs
from unit.mcp_rag_tool.rag_fakes import WordHashEmbedder, memory_settings

from mcp_rag_tool import bm25
from mcp_rag_tool.chunking import ChunkLimits
from mcp_rag_tool.ingest import API_ORIGIN, DocumentInput, Ingester, IngestProgress, find_documents, folder_origin
from mcp_rag_tool.points import SearchFilter
from mcp_rag_tool.store import VectorStore
from mcp_rag_tool.tokens import WordCounter

pytestmark = pytest.mark.anyio

LIMITS = ChunkLimits(max_tokens=40, overlap_tokens=5, counter=WordCounter())


@pytest.fixture
async def store() -> AsyncIterator[VectorStore]:
    opened = await VectorStore.open(memory_settings())
    await opened.ensure_collections(WordHashEmbedder.dimension, WordHashEmbedder.name)
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    (root / "guides").mkdir(parents=True)
    (root / "guides" / "retries.md").write_text("# Retries\n\nRetries use exponential backoff with jitter.\n")
    (root / "eclipses.txt").write_text("A solar eclipse happens when the moon passes between earth and sun.\n")
    (root / "page.html").write_text("<h1>Sourdough</h1><p>Feed the starter twice daily.</p>")
    return root


async def _texts_matching(store: VectorStore, words: str) -> list[tuple[str, str]]:
    _, [ranking] = await store.search([], [bm25.query_vector(words)], 50, SearchFilter())
    return sorted((chunk.source, chunk.text) for chunk in ranking)


def test_folders_are_walked_recursively_for_supported_files(tmp_path: Path) -> None:
    (tmp_path / "guide" / "deep").mkdir(parents=True)
    for name in ("guide/deep/a.md", "notes.txt", "readme.markdown", "page.htm", "paper.pdf"):
        (tmp_path / name).write_text("x")
    (tmp_path / "image.png").write_bytes(b"\x89PNG")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD.md").write_text("hidden")
    single = tmp_path / "guide" / "deep" / "a.md"

    found, missing = find_documents([tmp_path, single, tmp_path / "absent"])

    assert [(root, [f.source for f in files]) for root, files in found] == [
        (tmp_path, ["guide/deep/a.md", "notes.txt", "page.htm", "paper.pdf", "readme.markdown"]),
        (single, ["a.md"]),
    ]
    assert missing == [tmp_path / "absent"]


def test_the_same_relative_path_under_two_folders_is_indexed_once(tmp_path: Path) -> None:
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "README.md").write_text(name)

    found, _ = find_documents([tmp_path / "one", tmp_path / "two"])

    assert [(root.name, [f.source for f in files]) for root, files in found] == [("one", ["README.md"]), ("two", [])]


async def test_a_first_ingest_adds_every_document_with_its_title_and_origin(store: VectorStore, docs: Path) -> None:
    embedder = WordHashEmbedder()

    report = await Ingester(store, embedder, LIMITS).ingest_folders([docs])

    assert (report.added, report.unchanged, report.chunks) == (3, 0, 3)
    records = await store.sources()
    assert {(r.source, r.title, r.kind, r.chunks) for r in records.values()} == {
        ("guides/retries.md", "Retries", "markdown", 1),
        ("eclipses.txt", "eclipses.txt", "text", 1),
        ("page.html", "Sourdough", "html", 1),
    }
    assert {r.origin for r in records.values()} == {folder_origin(docs)}
    assert await store.count() == 3


async def test_unchanged_documents_are_skipped_without_embedding_anything(store: VectorStore, docs: Path) -> None:
    await Ingester(store, WordHashEmbedder(), LIMITS).ingest_folders([docs])
    again = WordHashEmbedder()

    report = await Ingester(store, again, LIMITS).ingest_folders([docs])

    assert (report.added, report.updated, report.unchanged, report.removed) == (0, 0, 3, 0)
    assert again.embedded == []


async def test_a_changed_document_is_re_embedded_and_replaces_its_old_chunks(store: VectorStore, docs: Path) -> None:
    await Ingester(store, WordHashEmbedder(), LIMITS).ingest_folders([docs])
    (docs / "guides" / "retries.md").write_text("# Retries\n\nRetries now use a fixed delay of two seconds.\n")
    embedder = WordHashEmbedder()

    report = await Ingester(store, embedder, LIMITS).ingest_folders([docs])

    assert (report.updated, report.unchanged) == (1, 2)
    assert embedder.embedded == ["Retries\n\nRetries now use a fixed delay of two seconds."]
    assert await _texts_matching(store, "retries") == [
        ("guides/retries.md", "Retries now use a fixed delay of two seconds.")
    ]
    assert await store.count() == 3


async def test_a_document_that_shrinks_leaves_no_chunk_behind(store: VectorStore, docs: Path) -> None:
    long = "# Retries\n\n" + "\n\n".join(f"Paragraph {i} about retry budgets and backoff limits." for i in range(12))
    (docs / "guides" / "retries.md").write_text(long)
    await Ingester(store, WordHashEmbedder(), LIMITS).ingest_folders([docs])
    before = (await store.sources())["guides/retries.md"].chunks
    (docs / "guides" / "retries.md").write_text("# Retries\n\nOne short paragraph about retry budgets.\n")

    await Ingester(store, WordHashEmbedder(), LIMITS).ingest_folders([docs])

    assert before > 1
    assert await _texts_matching(store, "retry budgets") == [
        ("guides/retries.md", "One short paragraph about retry budgets.")
    ]
    assert await store.count() == 3


async def test_a_deleted_document_is_removed_from_the_index(store: VectorStore, docs: Path) -> None:
    await Ingester(store, WordHashEmbedder(), LIMITS).ingest_folders([docs])
    (docs / "eclipses.txt").unlink()

    report = await Ingester(store, WordHashEmbedder(), LIMITS).ingest_folders([docs])

    assert (report.removed, report.outcomes["eclipses.txt"]) == (1, "removed")
    assert "eclipses.txt" not in await store.sources()
    assert await _texts_matching(store, "solar eclipse") == []
    assert await store.count() == 2


async def test_an_ingest_prunes_only_the_folders_it_was_given_and_never_added_documents(
    store: VectorStore, tmp_path: Path
) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    for root in (one, two):
        root.mkdir()
        (root / f"{root.name}.md").write_text(f"# {root.name}\n\nText of folder {root.name}.")
    ingester = Ingester(store, WordHashEmbedder(), LIMITS)
    await ingester.ingest_folders([one])
    await ingester.ingest_folders([two])
    await ingester.add([DocumentInput("notes/kept.md", "markdown", b"# Kept\n\nAdded by a model.", API_ORIGIN)])
    (one / "one.md").unlink()

    report = await ingester.ingest_folders([one])

    assert report.removed == 1
    assert sorted(await store.sources()) == ["notes/kept.md", "two.md"]


async def test_a_missing_folder_counts_as_empty_and_is_reported(store: VectorStore, docs: Path, tmp_path: Path) -> None:
    moved = tmp_path / "moved"
    await Ingester(store, WordHashEmbedder(), LIMITS).ingest_folders([docs])
    await anyio.Path(docs).rename(moved)

    report = await Ingester(store, WordHashEmbedder(), LIMITS).ingest_folders([docs])

    assert report.missing_paths == (str(docs),)
    assert report.removed == 3
    assert await store.count() == 0


async def test_an_unreadable_document_fails_alone_and_keeps_its_previous_version(
    store: VectorStore, docs: Path
) -> None:
    (docs / "report.pdf").write_bytes(b"%PDF-1.4\nnot really")
    await Ingester(store, WordHashEmbedder(), LIMITS).ingest_folders([docs])
    (docs / "guides" / "retries.md").write_text("# Retries\n\nStill here.")

    report = await Ingester(store, WordHashEmbedder(), LIMITS).ingest_folders([docs])

    assert report.outcomes["report.pdf"] == "failed"
    assert report.updated == 1
    assert "report.pdf" not in await store.sources()


async def test_chunks_of_several_documents_share_embedding_batches(store: VectorStore, docs: Path) -> None:
    embedder = WordHashEmbedder()

    await Ingester(store, embedder, LIMITS, batch_size=2).ingest_folders([docs])

    # One call for the three documents' chunks: the embedder gets up to four batches' worth per call
    # (it sorts them by length before batching, which pads less than batches in document order).
    assert embedder.batches == [3]
    assert len(await store.sources()) == 3  # each document committed once its last chunk was stored


async def test_added_documents_are_replaced_by_source_and_skipped_when_identical(store: VectorStore) -> None:
    ingester = Ingester(store, WordHashEmbedder(), LIMITS)
    first = DocumentInput("notes/a.md", "markdown", b"# A\n\nVersion one.", API_ORIGIN, tags=("q2",))

    added = await ingester.add([first])
    same = await ingester.add([first])
    changed = await ingester.add([DocumentInput("notes/a.md", "markdown", b"# A\n\nVersion two.", API_ORIGIN)])

    assert (added.outcomes, same.outcomes, changed.outcomes) == (
        {"notes/a.md": "added"},
        {"notes/a.md": "unchanged"},
        {"notes/a.md": "updated"},
    )
    assert await _texts_matching(store, "version") == [("notes/a.md", "Version two.")]


async def test_other_chunking_settings_re_embed_every_document(store: VectorStore, docs: Path) -> None:
    await Ingester(store, WordHashEmbedder(), LIMITS).ingest_folders([docs])
    wider = ChunkLimits(max_tokens=80, overlap_tokens=5, counter=WordCounter())

    report = await Ingester(store, WordHashEmbedder(), wider).ingest_folders([docs])

    assert report.updated == 3


async def test_another_embedder_rebuilds_the_collections(store: VectorStore, docs: Path) -> None:
    await Ingester(store, WordHashEmbedder(), LIMITS).ingest_folders([docs])

    rebuilt = await store.ensure_collections(64, "another-model")
    kept = await store.ensure_collections(64, "another-model")

    assert (rebuilt, kept) == (True, False)
    assert await store.sources() == {}
    assert await store.count() == 0


async def test_long_ingests_log_their_progress(store: VectorStore, docs: Path) -> None:
    ticks = iter(range(100))
    ingester = Ingester(store, WordHashEmbedder(), LIMITS, progress_seconds=1, clock=lambda: float(next(ticks)))

    with capture_logs() as logs:
        await ingester.ingest_folders([docs])

    progress = [entry for entry in logs if entry["event"] == "ingest_progress"]
    assert [entry["documents"] for entry in progress][-1] == "3/3"
    assert len(progress) >= 3
    done = next(entry for entry in logs if entry["event"] == "ingest_done")
    assert (done["added"], done["chunks"]) == (3, 3)


async def test_the_start_up_ingest_mirrors_its_folders_and_keeps_added_documents(
    store: VectorStore, tmp_path: Path
) -> None:
    old, new = tmp_path / "old", tmp_path / "new"
    for root in (old, new):
        root.mkdir()
        (root / f"{root.name}.md").write_text(f"# {root.name}\n\nText of folder {root.name}.")
    ingester = Ingester(store, WordHashEmbedder(), LIMITS)
    await ingester.ingest_folders([old])
    await ingester.add([DocumentInput("notes/kept.md", "markdown", b"# Kept\n\nAdded by a model.", API_ORIGIN)])

    report = await ingester.ingest_folders([new], prune_other_folders=True)

    assert (report.added, report.removed) == (1, 1)
    assert sorted(await store.sources()) == ["new.md", "notes/kept.md"]


class CommitFailsOnce(VectorStore):
    """A store whose first clean-up fails, like a process killed between storing chunks and committing."""

    failed = False

    async def delete_chunks(self, ids: Collection[str]) -> None:
        if not self.failed:
            self.failed = True
            raise RuntimeError("killed")
        await super().delete_chunks(ids)


async def test_an_ingest_interrupted_before_its_commit_is_cleaned_up_by_the_next(docs: Path) -> None:
    store = await CommitFailsOnce.open(memory_settings())
    await store.ensure_collections(WordHashEmbedder.dimension, WordHashEmbedder.name)
    retries = docs / "guides" / "retries.md"
    retries.write_text("# Retries\n\n" + "\n\n".join(f"Old paragraph {i} on retry budgets." for i in range(9)))
    try:
        with pytest.raises(RuntimeError, match="killed"):
            await Ingester(store, WordHashEmbedder(), LIMITS).ingest_folders([docs])
        interrupted = (await store.sources())["guides/retries.md"]
        retries.write_text("# Retries\n\nNew text on retry budgets.")
        report = await Ingester(store, WordHashEmbedder(), LIMITS).ingest_folders([docs])
        listed = await store.sources()
        texts = await _texts_matching(store, "retry budgets")
        count = await store.count()
    finally:
        await store.close()

    assert (interrupted.committed, interrupted.pending_chunks > 1) == (False, True)
    assert report.outcomes["guides/retries.md"] == "added"
    assert texts == [("guides/retries.md", "New text on retry budgets.")]
    assert count == 3
    assert all(record.committed and not record.pending_hash for record in listed.values())


async def test_an_ingest_tells_its_listener_how_far_it_has_come(store: VectorStore, docs: Path) -> None:
    heard: list[IngestProgress] = []

    async def listen(progress: IngestProgress) -> None:
        heard.append(progress)

    await Ingester(store, WordHashEmbedder(), LIMITS, batch_size=2).ingest_folders([docs], on_progress=listen)

    assert heard, "the listener heard nothing"
    last = heard[-1]
    assert (last.documents_done, last.documents_total, last.chunks) == (3, 3, 3)
    assert [p.documents_done for p in heard] == sorted(p.documents_done for p in heard)
