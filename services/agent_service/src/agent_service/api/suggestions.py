"""The console's suggestion cards: questions an empty conversation offers, from a TOML file the operator provides
(``AGENT_CONSOLE_SUGGESTIONS_FILE``), else the set shipped for the demo corpus (``console/suggestions.toml``)::

    [[suggestions]]
    title = "How does a run work?"               # the card's text
    prompt = "How does an agent run work, step by step?"   # what a click sends

A file that cannot be used refuses the start, in one line that names the setting, the file and the problem.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from suite_common.wire import Suggestion, SuggestionList

__all__ = ["DEFAULT_SUGGESTIONS_FILE", "SuggestionsFileError", "load_suggestions", "parse_suggestions"]

DEFAULT_SUGGESTIONS_FILE = Path(__file__).parent.parent / "console" / "suggestions.toml"
"""The default set: questions the demo corpus answers (``search_documents``). Not served as a console file (the
console serves no ``.toml``)."""

_SETTING = "AGENT_CONSOLE_SUGGESTIONS_FILE"
MAX_SUGGESTIONS = 12
MAX_TITLE_CHARS = 120
MAX_PROMPT_CHARS = 4000


class SuggestionsFileError(ValueError):
    """The suggestions file cannot be used; the message names the setting, the file and the problem (one line)."""


def _fail(source: str, problem: str) -> SuggestionsFileError:
    return SuggestionsFileError(f"{_SETTING}: {source}: {problem}")


def _text(entry: dict[str, Any], key: str, where: str, source: str, limit: int) -> str:
    value = entry.get(key)
    if not isinstance(value, str) or not value.strip():
        raise _fail(source, f"{where}: {key} must be a non-empty string")
    if len(value) > limit:
        raise _fail(source, f"{where}: {key} is longer than {limit} characters")
    return value.strip()


def parse_suggestions(text: str, *, source: str) -> SuggestionList:
    """The cards of a suggestions file's text; raises ``SuggestionsFileError``. No ``suggestions``: no cards."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise _fail(source, f"not TOML: {error}") from None
    unknown = sorted(set(document) - {"suggestions"})
    if unknown:
        raise _fail(source, f"unknown field {unknown[0]!r} (only [[suggestions]] tables)")
    entries = document.get("suggestions", [])
    if not isinstance(entries, list):
        raise _fail(source, "suggestions must be an array of tables ([[suggestions]])")
    if len(entries) > MAX_SUGGESTIONS:
        raise _fail(source, f"{len(entries)} suggestions, at most {MAX_SUGGESTIONS}")
    cards = []
    for index, entry in enumerate(entries):
        where = f"suggestions[{index}]"
        if not isinstance(entry, dict):
            raise _fail(source, f"{where} must be a table")
        extra = sorted(set(entry) - {"title", "prompt"})
        if extra:
            raise _fail(source, f"{where}: unknown field {extra[0]!r}")
        cards.append(
            Suggestion(
                title=_text(entry, "title", where, source, MAX_TITLE_CHARS),
                prompt=_text(entry, "prompt", where, source, MAX_PROMPT_CHARS),
            )
        )
    return SuggestionList(suggestions=cards)


def load_suggestions(path: Path | None) -> SuggestionList:
    """The cards of ``path`` (``None``: the default set); raises ``SuggestionsFileError``."""
    path = path or DEFAULT_SUGGESTIONS_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        problem = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        raise _fail(str(path), f"cannot read it: {problem}") from None
    return parse_suggestions(text, source=str(path))
