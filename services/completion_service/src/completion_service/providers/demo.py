"""The ``demo`` model: a deterministic stand-in so the suite runs without any account. NOT an LLM.

Like pydantic-ai's ``TestModel`` it reads no meaning; its answer is a pure function of the
request. Offered tools, it calls (once, all in one turn) those that fit the question best: that share
the most meaningful words with it by name, then by description; with arguments built from their input
schemas. It never calls a tool it has no sensible argument for (a URL, an e-mail address, a date: the
question is none of these), nor one whose name says it changes something. Given tool results, it
answers with a text that cites what each tool returned. Otherwise it echoes the question and explains
how to configure a real model.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Iterable
from typing import Any

from completion_service.providers._images import ImageInput, data_image
from suite_common.echo import clip
from suite_common.errors import ApiError
from suite_common.wire import (
    CompletionDone,
    CompletionEvent,
    CompletionRequest,
    CompletionResponse,
    Message,
    TextDelta,
    ToolCall,
    ToolCallEvent,
    ToolSpec,
    Usage,
)

__all__ = ["DEMO_MODEL", "DemoProvider", "demo_completion", "demo_events", "fitting_tools", "schema_arguments"]

DEMO_MODEL = "demo"
PROVIDER_NAME = "demo"

CITATION_CHARS = 400
"""How much of each tool result the answer quotes."""

_WORDS_PER_DELTA = 6

_COUNT_NAMES = frozenset({"top_k", "topk", "k", "n", "limit", "max_results", "num_results", "count", "size"})

_STOPWORD_TEXT = """
    about above after again against also among another anything been before being below between both
    cannot could does doing done down during each either else even every from further give given have
    having here hers herself himself into itself just know like made make many might more most much
    must myself need never none only other ought ours ourselves over please same shall should show some
    such tell than that their theirs them themselves then there these they thing this those through
    under until upon very want were what when where which while whom whose will with within without
    would your yours yourself yourselves using used uses return returns tool tools input output value
    values string number optional required default
"""
_STOPWORDS = frozenset(_STOPWORD_TEXT.split())

_CONFIGURE_HINT = (
    "To use a real model, set COMPLETION_OPENAI_API_KEY (OpenAI) or COMPLETION_OPENAI_BASE_URL (any "
    "OpenAI-compatible server such as vLLM or Ollama) and ask for that model by name, e.g. gpt-4o."
)


# --- choosing tools ----------------------------------------------------------------------------


def _stem(word: str) -> str:
    # Crude on purpose: "searches", "searching" and "search" should meet; nothing more is promised.
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and not word.endswith("ss") and len(word) - len(suffix) >= 4:
            word = word[: -len(suffix)]
            break
    if word.endswith("e") and len(word) >= 5:
        word = word[:-1]
    return word


def _meaningful_words(text: str) -> set[str]:
    # Splits snake_case and camelCase names too: "searchDocuments", "search_documents".
    spaced = re.sub(r"([a-z])([A-Z])", r"\1 \2", text)
    words = re.findall(r"[a-z0-9]+", spaced.lower())
    return {_stem(word) for word in words if len(word) >= 4 and word not in _STOPWORDS}


_WRITING_VERBS = ("add", "create", "delete", "remove", "update", "write", "insert", "set", "put", "send", "upload")


def _writes(tool: ToolSpec) -> bool:
    """A tool named for a change (``add_documents``, ``deleteFile``): a stand-in that reads no meaning must
    not call it with a question as its content."""
    first = re.split(r"[_\-\s]|(?<=[a-z])(?=[A-Z])", tool.name, maxsplit=1)[0].lower()
    return first in _WRITING_VERBS


_URL_NAME = re.compile(r"(?:^|_)(?:url|uri|href|link)s?$")
"""A property named for an address (``url``, ``page_url``, ``imageUrl``, ``links``), in snake case."""

_UNFILLABLE_FORMATS = frozenset(
    {"uri", "url", "uri-reference", "iri", "iri-reference", "uri-template", "email", "idn-email", "hostname"}
    | {"ipv4", "ipv6", "date", "date-time", "time", "duration", "uuid"}
)
"""String formats a question never is: a tool asking for one gets nothing sensible from the demo."""


def _snake(name: str) -> str:
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower()


def _needs_what_it_cannot_fill(schema: Any, root: dict[str, Any], depth: int = 0, name: str = "") -> bool:
    """Whether a required value under ``schema`` is a string the question cannot stand for: a URL (by ``format``
    or by its property's name), an e-mail address, a date... The demo would send the question there (the
    console once showed ``fetch_url`` failing in red on a question taken for its URL)."""
    resolved = _resolve(schema, root)
    if depth > 8 or isinstance(resolved.get("enum"), list) or "const" in resolved:
        return False
    kind = _schema_type(resolved)
    if kind == "string":
        return resolved.get("format") in _UNFILLABLE_FORMATS or bool(_URL_NAME.search(_snake(name)))
    if kind == "array":
        return _needs_what_it_cannot_fill(resolved.get("items", {}), root, depth + 1, name)
    if kind != "object":
        return False
    properties = resolved.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    required = resolved.get("required")
    names = [item for item in required if isinstance(item, str)] if isinstance(required, list) else []
    return any(_needs_what_it_cannot_fill(properties.get(item, {}), root, depth + 1, item) for item in names)


def _fit(asked: set[str], tool: ToolSpec) -> tuple[int, int]:
    """How well ``tool`` fits a question of the words ``asked``: the words shared with its name, then with its
    description."""
    return len(asked & _meaningful_words(tool.name)), len(asked & _meaningful_words(tool.description))


def fitting_tools(question: str, tools: Iterable[ToolSpec]) -> list[ToolSpec]:
    """The tools that fit ``question`` best, in order: that share a meaningful word with it, and the most by name,
    then by description (``search_documents`` over ``web_search`` for "search the documents"). Never a tool whose
    name says it changes something, nor one needing an argument the question cannot stand for (a URL)."""
    asked = _meaningful_words(question)
    candidates = [
        (tool, _fit(asked, tool))
        for tool in tools
        if not _writes(tool) and not _needs_what_it_cannot_fill(tool.input_schema, tool.input_schema)
    ]
    best = max((fit for _, fit in candidates if any(fit)), default=None)
    return [tool for tool, fit in candidates if fit == best] if best is not None else []


# --- building arguments ------------------------------------------------------------------------


def _resolve(schema: Any, root: dict[str, Any]) -> dict[str, Any]:
    """Follows a local ``$ref`` and picks the first non-null branch of ``anyOf``/``oneOf``."""
    for _ in range(32):  # a self-referencing $ref must not loop forever
        if not isinstance(schema, dict):
            return {}
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/"):
            target: Any = root
            for part in ref[2:].split("/"):
                target = target.get(part, {}) if isinstance(target, dict) else {}
            schema = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
            continue
        branches = schema.get("anyOf") or schema.get("oneOf")
        if isinstance(branches, list) and "type" not in schema:
            options = [b for b in branches if isinstance(b, dict) and b.get("type") != "null"]
            rest = {k: v for k, v in schema.items() if k not in ("anyOf", "oneOf")}
            schema = {**(options[0] if options else {}), **rest}
            continue
        return schema
    return {}


def _schema_type(schema: dict[str, Any]) -> str:
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if isinstance(kind, str):
        return kind
    return "object" if "properties" in schema else "string"


def _number(name: str, schema: dict[str, Any], kind: str) -> int | float:
    if isinstance(schema.get("default"), int | float):
        value: int | float = schema["default"]
    elif isinstance(schema.get("minimum"), int | float):
        value = schema["minimum"]
    elif isinstance(schema.get("exclusiveMinimum"), int | float):
        value = schema["exclusiveMinimum"] + 1
    else:
        value = 5 if name.lower() in _COUNT_NAMES else 1
    if isinstance(schema.get("maximum"), int | float):
        value = min(value, schema["maximum"])
    return int(value) if kind == "integer" else value


def _value(name: str, schema: Any, question: str, root: dict[str, Any], depth: int) -> Any:
    resolved = _resolve(schema, root)
    if isinstance(resolved.get("enum"), list) and resolved["enum"]:
        return resolved["enum"][0]
    if "const" in resolved:
        return resolved["const"]
    kind = _schema_type(resolved)
    if kind == "string":
        limit = resolved.get("maxLength")
        return question[:limit] if isinstance(limit, int) else question
    if kind in ("integer", "number"):
        return _number(name, resolved, kind)
    if kind == "boolean":
        default = resolved.get("default")
        return default if isinstance(default, bool) else False
    if kind == "array":
        if depth > 8:
            return []
        return [_value(name, resolved.get("items", {}), question, root, depth + 1)]
    if kind == "object":
        return _object(resolved, question, root, depth + 1) if depth <= 8 else {}
    return None


def _object(schema: dict[str, Any], question: str, root: dict[str, Any], depth: int) -> dict[str, Any]:
    properties = schema.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    required = schema.get("required")
    names = [name for name in required if isinstance(name, str)] if isinstance(required, list) else []
    return {name: _value(name, properties.get(name, {}), question, root, depth) for name in names}


def schema_arguments(input_schema: dict[str, Any], question: str) -> dict[str, Any]:
    """A value for every required property: the question for strings, defaults or minimums otherwise."""
    return _object(_resolve(input_schema, input_schema), question, input_schema, 0)


# --- answering ---------------------------------------------------------------------------------


def _words(text: str | None) -> int:
    return len(text.split()) if text else 0


def _last_user_index(messages: list[Message]) -> int:
    return max((i for i, message in enumerate(messages) if message.role == "user"), default=-1)


def _chosen_tools(request: CompletionRequest, question: str) -> list[ToolSpec]:
    choice = request.tool_choice
    if not request.tools or choice == "none":
        return []
    if choice == "required":
        return list(request.tools)
    if choice == "auto":
        return fitting_tools(question, request.tools)
    named = [tool for tool in request.tools if tool.name == choice.name]
    if not named:
        raise ApiError(400, "invalid_request", f"toolChoice names {clip(choice.name)!r}, which is not among the tools.")
    return named


def _images_received(message: Message) -> str:
    """What the demo says of a message's images: each one's type and size (``image/png, 68 bytes``); "" for none.
    It takes images as bytes (an https image was fetched before the call)."""
    seen = []
    for part in message.images:
        image = data_image(part.image_url.url)
        seen.append(f"{image.media_type}, {image.size} bytes" if image is not None else "an image URL")
    if not seen:
        return ""
    return f"{len(seen)} image{'s' if len(seen) > 1 else ''} ({'; '.join(seen)})"


def _cited_answer(request: CompletionRequest, results: list[Message]) -> str:
    names = {call.id: call.name for message in request.messages if message.tool_calls for call in message.tool_calls}
    lines = []
    for number, result in enumerate(results, start=1):
        text = " ".join((result.text or "").split())
        if len(text) > CITATION_CHARS:
            text = text[:CITATION_CHARS].rstrip() + " ..."
        failed = " (failed)" if result.is_error else ""
        images = _images_received(result)
        text = f"{text} [{images}]" if images and text else text or images
        lines.append(f"[{number}] {names.get(result.tool_call_id or '', 'tool')}{failed}: {text or '(empty)'}")
    return (
        "This is the demo model, a deterministic stand-in that is not an LLM: it cannot read or "
        "reason, so here is what the tools returned.\n\n" + "\n".join(lines) + "\n\n" + _CONFIGURE_HINT
    )


def _direct_answer(question: str, request: CompletionRequest, images: str) -> str:
    echoed = " ".join(question.split())
    asked = f'You asked: "{echoed}". ' if echoed else ""
    if images:
        asked += f"You sent {images}. "
    about_tools = (
        " Offered tools, it calls those that share the most words with the question (by name, then by description)."
        if request.tools and request.tool_choice != "none"
        else ""
    )
    return (
        f"{asked}This is the demo model, a deterministic stand-in that is not an LLM, so it cannot "
        f"answer.{about_tools} {_CONFIGURE_HINT}"
    )


def _formatted(text: str, request: CompletionRequest) -> str:
    """The answer as ``response_format`` asks: a value made from the schema (strings say ``text``), or the object
    ``{"answer": text}``; plain ``text`` otherwise."""
    answer_format = request.response_format
    if answer_format is None or answer_format.type == "text":
        return text
    if answer_format.json_schema is None:
        return json.dumps({"answer": text})
    schema = answer_format.json_schema.schema_
    return json.dumps(_value("answer", schema, text, schema, 0))


def demo_completion(request: CompletionRequest) -> CompletionResponse:
    """The demo model's whole answer; the same request always gets the same answer."""
    start = _last_user_index(request.messages)
    question = (request.messages[start].text or "") if start >= 0 else ""
    since_question = request.messages[start + 1 :]
    results = [message for message in since_question if message.role == "tool"]
    input_tokens = sum(_words(message.text) for message in request.messages)
    if not results:
        tools = _chosen_tools(request, question)
        if tools:
            # Ids stay unique over a whole conversation: number on from the calls already in it.
            earlier = sum(len(message.tool_calls or []) for message in request.messages)
            calls = [
                ToolCall(
                    id=f"call_demo_{earlier + number}",
                    name=tool.name,
                    arguments=schema_arguments(tool.input_schema, question),
                )
                for number, tool in enumerate(tools, start=1)
            ]
            output_tokens = sum(_words(f"{call.name} {json.dumps(call.arguments)}") for call in calls)
            return CompletionResponse(
                message=Message(role="assistant", tool_calls=calls),
                finish_reason="tool_calls",
                usage=Usage(input_tokens=input_tokens, output_tokens=output_tokens),
                model=request.model,
                provider=PROVIDER_NAME,
            )
    if results:
        text = _cited_answer(request, results)
    else:
        text = _direct_answer(question, request, _images_received(request.messages[start]) if start >= 0 else "")
    text = _formatted(text, request)
    return CompletionResponse(
        message=Message(role="assistant", content=text),
        finish_reason="stop",
        usage=Usage(input_tokens=input_tokens, output_tokens=_words(text)),
        model=request.model,
        provider=PROVIDER_NAME,
    )


def _text_deltas(text: str) -> list[str]:
    """Groups of words, whitespace kept, so that joining them gives ``text`` back exactly."""
    pieces = re.findall(r"\S+\s*", text)
    leading = text[: len(text) - len(text.lstrip())]
    if leading:
        pieces.insert(0, leading)
    return ["".join(pieces[i : i + _WORDS_PER_DELTA]) for i in range(0, len(pieces), _WORDS_PER_DELTA)]


def demo_events(request: CompletionRequest) -> list[CompletionEvent]:
    """The same answer as ``demo_completion``, as stream events."""
    response = demo_completion(request)
    events: list[CompletionEvent] = [TextDelta(delta=piece) for piece in _text_deltas(response.message.text or "")]
    events.extend(ToolCallEvent(id=c.id, name=c.name, arguments=c.arguments) for c in response.message.tool_calls or [])
    events.append(
        CompletionDone(
            finish_reason=response.finish_reason, usage=response.usage, model=response.model, provider=PROVIDER_NAME
        )
    )
    return events


class DemoProvider:
    """The provider behind the model ``demo``: no I/O, answers at once, ignores the time budget."""

    name = PROVIDER_NAME
    image_input: ImageInput = "bytes"  # it reports each image's size: https images are fetched first

    async def complete(
        self, request: CompletionRequest, upstream_model: str, timeout_seconds: float
    ) -> CompletionResponse:
        return demo_completion(request)

    async def stream(
        self, request: CompletionRequest, upstream_model: str, timeout_seconds: float
    ) -> AsyncIterator[CompletionEvent]:
        for event in demo_events(request):
            yield event
