"""RAG_* settings and the command line that reads them."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from mcp_rag_tool.__main__ import main
from mcp_rag_tool.settings import DEFAULT_QDRANT_PATH, RagSettings
from suite_common.mcp_tool import CommandLine, load_settings, parse_command_line


def test_docs_paths_accept_a_comma_separated_list_or_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAG_DOCS_PATHS", "docs, notes/faq.md")
    assert RagSettings().docs_paths == [Path("docs"), Path("notes/faq.md")]

    monkeypatch.setenv("RAG_DOCS_PATHS", '["/srv/a b", "c"]')
    assert RagSettings().docs_paths == [Path("/srv/a b"), Path("c")]

    monkeypatch.setenv("RAG_DOCS_PATHS", "")
    assert RagSettings().docs_paths == []


def test_defaults_persist_the_index_in_a_data_folder_and_serve_on_port_8101(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RAG_DOCS_PATHS", "RAG_PORT", "RAG_EMBEDDING_PROVIDER"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RAG_QDRANT_URL", "")  # empty means unset
    monkeypatch.setenv("RAG_QDRANT_PATH", "")  # and here: the default folder
    settings = RagSettings()

    assert (settings.port, settings.docs_paths, settings.qdrant_path, settings.qdrant_url) == (
        8101,
        [Path("docs")],
        DEFAULT_QDRANT_PATH,
        None,
    )
    assert (settings.embedding_provider, settings.chunk_max_tokens, settings.rrf_k) == ("local", 256, 2)
    assert not settings.in_memory


def test_memory_is_asked_for_by_name() -> None:
    assert RagSettings(qdrant_path=":memory:").in_memory


def test_a_local_folder_and_a_server_url_together_are_refused() -> None:
    with pytest.raises(ValidationError, match="not both"):
        RagSettings(qdrant_path="/tmp/q", qdrant_url="http://qdrant:6333")


def test_a_server_url_alone_is_enough() -> None:
    settings = RagSettings(qdrant_url="http://qdrant:6333/")

    assert (settings.qdrant_url, settings.in_memory) == ("http://qdrant:6333", False)


def test_overlap_must_be_at_most_half_a_chunk() -> None:
    with pytest.raises(ValidationError, match="at most half of chunk_max_tokens"):
        RagSettings(chunk_max_tokens=64, chunk_overlap_tokens=33)


def test_the_embeddings_url_must_be_http(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAG_EMBEDDING_URL", "ftp://embeddings")

    with pytest.raises(ValidationError, match="must be an http"):
        RagSettings()


def test_the_command_line_defaults_to_stdio_and_the_configured_address(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAG_HOST", "0.0.0.0")
    monkeypatch.setenv("RAG_PORT", "9101")

    def settings_for(*argv: str) -> tuple[CommandLine, RagSettings]:
        command_line = parse_command_line(RagSettings, list(argv), prog="mcp-rag-tool", description="test")
        return command_line, load_settings(RagSettings, command_line, prog="mcp-rag-tool")

    default_line, default_settings = settings_for()
    http_line, http_settings = settings_for("--transport", "streamable-http", "--port", "8111")

    assert default_line.transport == "stdio"
    assert (default_settings.host, default_settings.port) == ("0.0.0.0", 9101)
    assert http_line.transport == "streamable-http"
    assert (http_settings.host, http_settings.port) == ("0.0.0.0", 8111)


def test_inconsistent_settings_end_the_command_with_the_reason_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RAG_QDRANT_PATH", "/tmp/q")
    monkeypatch.setenv("RAG_QDRANT_URL", "http://qdrant:6333")

    with pytest.raises(SystemExit) as exit_info:
        main(["--transport", "streamable-http"])

    assert exit_info.value.code == (
        "mcp-rag-tool: invalid RAG_* settings: set RAG_QDRANT_PATH (local mode) or RAG_QDRANT_URL (a server), not both"
    )


def test_both_retriever_weights_at_zero_are_refused() -> None:
    with pytest.raises(ValidationError, match="cannot both be 0"):
        RagSettings(dense_weight=0, bm25_weight=0)
    assert RagSettings(dense_weight=0).bm25_weight == 1.0
