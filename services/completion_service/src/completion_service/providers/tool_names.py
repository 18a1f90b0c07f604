"""Tool names every provider accepts: the catalog's names mapped to provider-safe ones and back.

MCP servers name tools freely (dots, spaces, non-ASCII letters, up to 128 characters); providers
accept far less (OpenAI, Anthropic and Bedrock ``^[a-zA-Z0-9_-]{1,64}$``, Gemini a letter or ``_``
first, then ``[a-zA-Z0-9_.-]``, 64 at most). A request whose names are all valid for its provider
is left exactly as it is (``ToolNames.plan`` answers ``None`` after one set lookup per name).
Otherwise each invalid name gets a safe name that is

- readable: the name with accents dropped, other characters outside the rule as ``_`` (one per
  run), cut to the rule's length (``web.search`` -> ``web_search``, ``Café Menu`` -> ``Cafe_Menu``);
- collision-free: when that is taken (by a valid name of the request, or by another mapped one),
  an 8-hex-digit hash of the original name is appended (``web_search_3f2a9c1b``);
- stable: the same set of names always maps the same way, whatever their order, so a
  conversation replayed on the next turn gets the names the model saw.

The mapping covers tool specs, the calls of the replayed conversation and a named tool choice on
the way out, and the model's calls (whole or streamed) on the way back. Pure functions, no I/O.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from suite_common.wire import (
    CompletionEvent,
    CompletionRequest,
    CompletionResponse,
    Message,
    NamedToolChoice,
    ToolCall,
    ToolCallEvent,
)

__all__ = ["NameRule", "ToolNames", "safe_names"]

_HASH_DIGITS = 8
_REMEMBERED = 4096
_EMPTY = "tool"
"""The readable part of a name that keeps no character the provider accepts (``搜索``)."""


class NameRule:
    """What one provider accepts as a tool name: characters from ``chars`` (a regex character-class body),
    the first one also from ``first`` when given, ``max_length`` at most. Every rule must accept ``_``,
    ASCII letters and digits (what a safe name is made of)."""

    def __init__(self, chars: str, max_length: int, *, first: str | None = None) -> None:
        self.max_length = max_length
        head = f"[{first or chars}]"
        self._valid = re.compile(f"{head}[{chars}]{{0,{max_length - 1}}}")
        self._outside = re.compile(f"[^{chars}]+")
        self._first = re.compile(head)
        self._accepted: set[str] = set()
        """Names already found valid: a catalog's names recur in every request, and a set lookup costs a
        fraction of a regex match. Bounded: emptied when full."""

    def accepts(self, name: str) -> bool:
        if name in self._accepted:
            return True
        if self._valid.fullmatch(name) is None:
            return False
        if len(self._accepted) >= _REMEMBERED:
            self._accepted.clear()
        self._accepted.add(name)
        return True

    def accepts_all(self, request: CompletionRequest) -> bool:
        """Every tool name of ``request`` is valid: the hot path, written out (no generator) to stay cheap."""
        accepted, accepts = self._accepted, self.accepts
        for tool in request.tools:
            if tool.name not in accepted and not accepts(tool.name):
                return False
        for message in request.messages:
            for call in message.tool_calls or ():
                if call.name not in accepted and not accepts(call.name):
                    return False
        choice = request.tool_choice
        return not isinstance(choice, NamedToolChoice) or accepts(choice.name)

    def readable(self, name: str) -> str:
        """``name`` made valid for this rule, keeping as much of it as can be read."""
        folded = "".join(c for c in unicodedata.normalize("NFKD", name) if not unicodedata.combining(c))
        safe = self._outside.sub("_", folded).strip("_") or _EMPTY
        if not self._first.match(safe):
            safe = "_" + safe
        return safe[: self.max_length]


def _hashed(name: str, readable: str, rule: NameRule, attempt: int) -> str:
    seed = name if attempt == 0 else f"{attempt}:{name}"
    suffix = "_" + hashlib.sha256(seed.encode()).hexdigest()[:_HASH_DIGITS]
    return readable[: rule.max_length - len(suffix)] + suffix


def safe_names(names: Iterable[str], rule: NameRule) -> dict[str, str]:
    """Each name ``rule`` refuses -> its safe name; names it accepts are left out (they stay as they are)."""
    distinct = set(names)
    taken = {name for name in distinct if rule.accepts(name)}
    mapping: dict[str, str] = {}
    for name in sorted(distinct - taken):  # sorted: the outcome must not depend on the request's order
        readable = rule.readable(name)
        candidate, attempt = readable, 0
        while candidate in taken:
            candidate = _hashed(name, readable, rule, attempt)
            attempt += 1
        taken.add(candidate)
        mapping[name] = candidate
    return mapping


def _request_names(request: CompletionRequest) -> Iterator[str]:
    for tool in request.tools:
        yield tool.name
    for message in request.messages:
        for call in message.tool_calls or ():
            yield call.name
    if isinstance(request.tool_choice, NamedToolChoice):
        yield request.tool_choice.name


@dataclass(frozen=True)
class ToolNames:
    """The names of one request: caller's -> provider's (``outbound``) and back (``inbound``)."""

    to_provider: Mapping[str, str]
    to_caller: Mapping[str, str]

    @classmethod
    def plan(cls, request: CompletionRequest, rule: NameRule) -> ToolNames | None:
        """The mapping ``request`` needs under ``rule``, or ``None`` when every name is already valid."""
        if rule.accepts_all(request):
            return None
        to_provider = safe_names(_request_names(request), rule)
        return cls(to_provider, {safe: name for name, safe in to_provider.items()})

    def outbound(self, request: CompletionRequest) -> CompletionRequest:
        """``request`` with the provider's names in its tools, its replayed calls and a named tool choice."""
        rename = self.to_provider
        update: dict[str, object] = {
            "tools": [
                tool.model_copy(update={"name": rename[tool.name]}) if tool.name in rename else tool
                for tool in request.tools
            ],
            "messages": [self._message(message, rename) for message in request.messages],
        }
        choice = request.tool_choice
        if isinstance(choice, NamedToolChoice) and choice.name in rename:
            update["tool_choice"] = NamedToolChoice(name=rename[choice.name])
        return request.model_copy(update=update)

    def inbound(self, response: CompletionResponse) -> CompletionResponse:
        """``response`` with the caller's names on the model's calls."""
        message = self._message(response.message, self.to_caller)
        return response if message is response.message else response.model_copy(update={"message": message})

    def inbound_event(self, event: CompletionEvent) -> CompletionEvent:
        """A stream event with the caller's name on a tool call; other events as they are."""
        if isinstance(event, ToolCallEvent) and event.name in self.to_caller:
            return event.model_copy(update={"name": self.to_caller[event.name]})
        return event

    @staticmethod
    def _message(message: Message, rename: Mapping[str, str]) -> Message:
        calls = message.tool_calls
        if not calls or not any(call.name in rename for call in calls):
            return message
        renamed: list[ToolCall] = [
            call.model_copy(update={"name": rename[call.name]}) if call.name in rename else call for call in calls
        ]
        return message.model_copy(update={"tool_calls": renamed})
