"""Anthropic Messages API (``POST /v1/messages``), extended thinking included. The package, by seam:

- ``request``: the neutral request as the Messages body (pure, tested on exact bodies);
- ``response``: a whole message or the stream's events, folded into the neutral answer or events;
- ``errors``: Anthropic's error bodies and stream error events as the caller's errors;
- ``provider``: ``AnthropicProvider``, how a call is made (the shared ``HttpAdapter`` makes it);
- ``schema``: a tool's JSON Schema as Anthropic's ``input_schema`` (draft 2020-12).

What it shares with Bedrock's Converse (Claude's limits, content blocks) is in ``providers._anthropic_shape``.
This module is the package's face: what the rest of the service and its tests use.
"""

from completion_service.providers.anthropic.errors import stream_error, translate_error
from completion_service.providers.anthropic.provider import ANTHROPIC_VERSION, AnthropicProvider
from completion_service.providers.anthropic.request import EMPTY_TURN_TEXT, TOOL_NAMES, build_request_body
from completion_service.providers.anthropic.response import StreamAssembler, parse_response

__all__ = [
    "ANTHROPIC_VERSION",
    "EMPTY_TURN_TEXT",
    "TOOL_NAMES",
    "AnthropicProvider",
    "StreamAssembler",
    "build_request_body",
    "parse_response",
    "stream_error",
    "translate_error",
]
