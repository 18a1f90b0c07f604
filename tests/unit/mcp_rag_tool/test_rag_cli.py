"""`mcp-rag-tool ingest PATH...`: incremental ingest into the configured store, and its usage errors."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from unit.mcp_rag_tool.rag_fakes import WordHashEmbedder

from mcp_rag_tool.__main__ import main
from mcp_rag_tool.cli import ProgressBar, format_progress, format_report, run_ingest
from mcp_rag_tool.ingest import IngestProgress, IngestReport
from mcp_rag_tool.settings import RagSettings
from mcp_rag_tool.store import StoreLocked, VectorStore
from mcp_rag_tool.tokens import WordCounter

pytestmark = pytest.mark.anyio


async def test_ingesting_twice_skips_what_did_not_change_and_the_store_keeps_it(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\nAlpha text.")
    (docs / "b.txt").write_text("Beta text.")
    settings = RagSettings(qdrant_path=str(tmp_path / "qdrant"), docs_paths=[])

    first = await run_ingest(settings, [docs], embedder=WordHashEmbedder(), counter=WordCounter())
    (docs / "b.txt").unlink()
    second = await run_ingest(settings, [docs], embedder=WordHashEmbedder(), counter=WordCounter())
    store = await VectorStore.open(settings)
    try:
        remaining = sorted(await store.sources())
    finally:
        await store.close()

    assert (first.added, second.unchanged, second.removed) == (2, 1, 1)
    assert remaining == ["a.md"]


async def test_a_store_held_by_a_running_server_is_reported_not_corrupted(tmp_path: Path) -> None:
    settings = RagSettings(qdrant_path=str(tmp_path / "qdrant"), docs_paths=[])
    holder = await VectorStore.open(settings)
    try:
        with pytest.raises(StoreLocked, match="in use by another process"):
            await run_ingest(settings, [tmp_path], embedder=WordHashEmbedder(), counter=WordCounter())
    finally:
        await holder.close()


def test_the_summary_counts_every_outcome() -> None:
    report = IngestReport(added=2, updated=1, unchanged=7, removed=1, failed=0, chunks=30, seconds=2.0)

    assert format_report(report) == (
        "ingested 10 documents: 2 added, 1 updated, 7 unchanged, 1 removed, 0 failed; "
        "30 chunks embedded in 2.0 s (15.0 chunks/s)"
    )


def test_a_path_that_does_not_exist_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["ingest", str(tmp_path / "nope")])

    assert exit_info.value.code == 2
    assert f"not found: {tmp_path / 'nope'}" in capsys.readouterr().err


def test_an_in_memory_store_is_refused_because_the_ingest_would_be_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAG_QDRANT_PATH", ":memory:")

    with pytest.raises(SystemExit) as exit_info:
        main(["ingest", str(tmp_path)])

    assert "the ingest would be lost when this command ends" in str(exit_info.value.code)


def test_the_progress_line_shows_documents_chunks_rate_and_time_left() -> None:
    line = format_progress(IngestProgress(documents_done=100, documents_total=400, chunks=2500, seconds=125.0))

    assert line.startswith("[#####...............] documents 100/400")
    assert "2,500 chunks" in line
    assert "20.0 chunks/s" in line
    assert "6m15s left" in line  # 300 documents to go at 1.25 s each


async def test_the_bar_redraws_one_line_on_a_terminal_and_ends_it(tmp_path: Path) -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    bar = ProgressBar(terminal)
    await bar.update(IngestProgress(1, 2, 10, 1.0))
    await bar.update(IngestProgress(2, 2, 20, 2.0))
    bar.close()

    output = terminal.getvalue()
    assert output.count("\r\x1b[2K") == 2
    assert output.endswith("documents 2/2 · 20 chunks · 10.0 chunks/s · 0s left\n")
