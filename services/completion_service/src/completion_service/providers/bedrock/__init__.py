"""Amazon Bedrock's Converse and ConverseStream APIs, one wire format for every model Bedrock hosts. The package, by
seam:

- ``request``: the neutral request as the Converse body (pure, tested on exact bodies);
- ``response``: a whole Converse response, or the stream's decoded events, folded into the neutral answer or events;
- ``errors``: Bedrock's error answers and the stream's exception frames as the caller's errors;
- ``provider``: ``BedrockProvider``, how a call is made (each attempt signed afresh with botocore's SigV4 signer; the
  shared ``HttpAdapter`` makes it), and the stream's AWS event-stream frames decoded by botocore's
  ``EventStreamBuffer``.

What it shares with Anthropic's Messages API (Claude's limits, content blocks) is in ``providers._anthropic_shape``.
This module is the package's face: what the rest of the service and its tests use.
"""

from completion_service.providers.bedrock.errors import translate_error, translate_stream_exception
from completion_service.providers.bedrock.provider import BedrockProvider
from completion_service.providers.bedrock.request import PROVIDER_NAME, TOOL_NAMES, build_request_body
from completion_service.providers.bedrock.response import ConverseStreamAssembler, parse_response

__all__ = [
    "PROVIDER_NAME",
    "TOOL_NAMES",
    "BedrockProvider",
    "ConverseStreamAssembler",
    "build_request_body",
    "parse_response",
    "translate_error",
    "translate_stream_exception",
]
