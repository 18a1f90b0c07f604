"""Google Gemini's ``generateContent``, on the Gemini API (API key) and on Vertex AI (bearer token).

Both speak the same body; only the URL and the credentials differ. The package, by seam:

- ``request``: the neutral request as the body (pure, tested on exact bodies);
- ``response``: a whole answer or the stream's chunks, folded into the neutral answer or events;
- ``errors``: Google's error bodies as the caller's errors;
- ``endpoints``: the Gemini API and Vertex AI (URL, credentials), and the provider names;
- ``provider``: ``GeminiProvider``, how a call is made (the shared ``HttpAdapter`` makes it);
- ``schema``: a tool's JSON Schema rewritten into Gemini's subset.

This module is the package's face: what the rest of the service and its tests use.
"""

from completion_service.providers.gemini.endpoints import DEFAULT_BASE_URL, TOOL_NAMES
from completion_service.providers.gemini.errors import translate_error
from completion_service.providers.gemini.provider import GeminiProvider
from completion_service.providers.gemini.request import (
    CONTINUE_TEXT,
    SKIP_SIGNATURE,
    build_request_body,
    thinking_config,
)
from completion_service.providers.gemini.response import StreamAssembler, parse_response

__all__ = [
    "CONTINUE_TEXT",
    "DEFAULT_BASE_URL",
    "SKIP_SIGNATURE",
    "TOOL_NAMES",
    "GeminiProvider",
    "StreamAssembler",
    "build_request_body",
    "parse_response",
    "thinking_config",
    "translate_error",
]
