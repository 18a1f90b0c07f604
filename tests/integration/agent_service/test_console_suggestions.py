"""The console's suggestion cards (AGENT_CONSOLE_SUGGESTIONS_FILE): the file read at start, refused there when it
cannot be used, and served as ``GET /api/v1/agent/console/suggestions``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from pydantic import SecretStr

from agent_service.api.suggestions import DEFAULT_SUGGESTIONS_FILE, SuggestionsFileError, load_suggestions
from agent_service.app import create_app
from agent_service.settings import AgentSettings
from support.servers import serve_app

pytestmark = pytest.mark.anyio

CARDS = """
[[suggestions]]
title = "Opening hours"
prompt = "When is the library open?"

[[suggestions]]
title = "  Late fees  "
prompt = "What does a late return cost?"
"""


def _settings(suggestions: Path | None = None) -> AgentSettings:
    closed = "http://127.0.0.1:9"  # nothing is called: the suggestions need no other service
    return AgentSettings(
        completion_url=closed,
        mcp_client_url=closed,
        mcp_service_secret=SecretStr("s"),
        database_url="",
        console_suggestions_file=suggestions,
    )


async def test_the_operators_cards_are_served_in_the_files_order(tmp_path: Path) -> None:
    cards = tmp_path / "cards.toml"
    cards.write_text(CARDS)
    app = create_app(_settings(cards))
    async with serve_app(app) as url, httpx.AsyncClient(base_url=url) as http:
        answer = await http.get("/api/v1/agent/console/suggestions")
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "suggestions": [
            {"title": "Opening hours", "prompt": "When is the library open?"},
            {"title": "Late fees", "prompt": "What does a late return cost?"},
        ]
    }


async def test_without_a_file_the_demo_corpus_set_is_served(tmp_path: Path) -> None:
    async with serve_app(create_app(_settings())) as url, httpx.AsyncClient(base_url=url) as http:
        answer = await http.get("/api/v1/agent/console/suggestions")
        as_file = await http.get("/console/suggestions.toml")
    assert answer.status_code == 200, answer.text
    served = answer.json()["suggestions"]
    assert served == load_suggestions(DEFAULT_SUGGESTIONS_FILE).model_dump()["suggestions"]
    assert 1 <= len(served) <= 12
    # Every default card asks to search the documents: the demo model then calls search_documents.
    assert all("Search the documents" in card["prompt"] for card in served)
    assert as_file.status_code == 404  # the default set is read by the service, not served as a console file


def test_a_file_without_suggestions_gives_no_cards(tmp_path: Path) -> None:
    empty = tmp_path / "none.toml"
    empty.write_text("# no cards here\n")
    assert load_suggestions(empty).suggestions == []


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[[suggestions]\n", "not TOML"),
        ('[[suggestions]]\ntitle = "t"\n', "suggestions[0]: prompt must be a non-empty string"),
        ('[[suggestions]]\ntitle = " "\nprompt = "p"\n', "suggestions[0]: title must be a non-empty string"),
        ('[[suggestions]]\ntitle = "t"\nprompt = "p"\nicon = "x"\n', "suggestions[0]: unknown field 'icon'"),
        ('suggestions = "ask me"\n', "suggestions must be an array of tables"),
        ('[cards]\ntitle = "t"\n', "unknown field 'cards'"),
        ('[[suggestions]]\ntitle = "t"\nprompt = "p"\n' * 13, "13 suggestions, at most 12"),
        (f'[[suggestions]]\ntitle = "{"t" * 121}"\nprompt = "p"\n', "title is longer than 120 characters"),
    ],
)
def test_a_suggestions_file_that_cannot_be_used_is_refused_with_its_problem(
    tmp_path: Path, text: str, problem: str
) -> None:
    bad = tmp_path / "cards.toml"
    bad.write_text(text)
    with pytest.raises(SuggestionsFileError) as refused:
        load_suggestions(bad)
    assert str(refused.value).startswith(f"AGENT_CONSOLE_SUGGESTIONS_FILE: {bad}: ")
    assert problem in str(refused.value)


def test_a_suggestions_file_that_cannot_be_used_ends_the_start_with_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "missing.toml"
    env = {name: value for name, value in os.environ.items() if not name.startswith("AGENT_")}
    env.update(
        AGENT_PORT="0",
        AGENT_MCP_SERVICE_SECRET="s3cret",
        AGENT_CONSOLE_SUGGESTIONS_FILE=str(missing),
        HOME=str(tmp_path),
    )
    finished = subprocess.run(
        [sys.executable, "-m", "agent_service"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert finished.returncode == 1
    assert finished.stderr.splitlines() == [
        f"agent-service: AGENT_CONSOLE_SUGGESTIONS_FILE: {missing}: cannot read it: No such file or directory"
    ]
