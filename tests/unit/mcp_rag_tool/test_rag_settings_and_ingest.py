"""RAG_* settings from the environment, and which files an ingest picks up."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from mcp_rag_tool.__main__ import main
from mcp_rag_tool.ingest import find_documents, load_chunks
from mcp_rag_tool.settings import RagSettings
from suite_common.mcp_tool import CommandLine, load_settings, parse_command_line


def test_docs_paths_accept_a_comma_separated_list_or_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAG_DOCS_PATHS", "docs, notes/faq.md")
    assert RagSettings().docs_paths == [Path("docs"), Path("notes/faq.md")]

    monkeypatch.setenv("RAG_DOCS_PATHS", '["/srv/a b", "c"]')
    assert RagSettings().docs_paths == [Path("/srv/a b"), Path("c")]


def test_defaults_index_docs_in_memory_on_port_8101(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RAG_DOCS_PATHS", "RAG_QDRANT_PATH", "RAG_PORT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RAG_QDRANT_URL", "")  # empty means unset
    settings = RagSettings()

    assert (settings.port, settings.docs_paths, settings.qdrant_path, settings.qdrant_url) == (
        8101,
        [Path("docs")],
        None,
        None,
    )


def test_local_path_and_server_url_together_are_refused() -> None:
    with pytest.raises(ValidationError, match="not both"):
        RagSettings(qdrant_path="/tmp/q", qdrant_url="http://qdrant:6333")


def test_overlap_must_be_smaller_than_a_chunk() -> None:
    with pytest.raises(ValidationError, match="chunk_overlap_words must be smaller"):
        RagSettings(chunk_max_words=30, chunk_overlap_words=30)


def test_folders_are_walked_recursively_for_supported_files(tmp_path: Path) -> None:
    (tmp_path / "guide" / "deep").mkdir(parents=True)
    (tmp_path / "guide" / "deep" / "a.md").write_text("# A\n\nalpha")
    (tmp_path / "notes.txt").write_text("beta")
    (tmp_path / "readme.markdown").write_text("gamma")
    (tmp_path / "image.png").write_bytes(b"\x89PNG")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD.md").write_text("hidden")
    single = tmp_path / "guide" / "deep" / "a.md"

    files, missing = find_documents([tmp_path, single, tmp_path / "absent"])

    assert [f.source for f in files] == ["guide/deep/a.md", "notes.txt", "readme.markdown", "a.md"]
    assert missing == [tmp_path / "absent"]


def test_the_same_relative_path_under_two_folders_is_indexed_once(tmp_path: Path) -> None:
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "README.md").write_text(name)

    files, _ = find_documents([tmp_path / "one", tmp_path / "two"])

    assert [(f.source, f.path.parent.name) for f in files] == [("README.md", "one")]


def test_loaded_chunks_carry_their_relative_source(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "x.md").write_text("# X\n\n## Part\n\nhello there")

    files, _ = find_documents([tmp_path])
    chunks = load_chunks(files, max_words=50, overlap_words=5)

    assert [(c.source, c.title, c.heading, c.text) for c in chunks] == [("sub/x.md", "X", "X > Part", "hello there")]


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
        "mcp-rag-tool: invalid RAG_* settings:\n"
        "  settings: Value error, set RAG_QDRANT_PATH (local mode) or RAG_QDRANT_URL (a server), not both"
    )
