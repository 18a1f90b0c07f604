"""A scripted Amazon Bedrock runtime: Converse and ConverseStream on the real wire, answers from a script.

Serve ``ScriptedBedrock(...).app`` with ``support.servers.serve_app`` and set the provider's
endpoint URL to it. Every request must carry a valid SigV4 signature (service ``bedrock``) for
the scripted credentials: the server recomputes it with botocore over the headers the request
says it signed, and answers 403 ``InvalidSignatureException`` otherwise, as AWS does.
``POST /model/{modelId}/converse`` answers a Converse JSON response; ``/converse-stream`` an
``application/vnd.amazon.eventstream`` body of binary frames (prelude, headers, JSON payload,
CRC32s), text split over several ``contentBlockDelta`` events and tool input split into
several partial JSON fragments, ending with ``messageStop`` and ``metadata``.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import json
import re
import struct
from collections import deque
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

__all__ = [
    "ACCESS_KEY_ID",
    "REGION",
    "SECRET_ACCESS_KEY",
    "BedrockError",
    "BedrockRaw",
    "BedrockReply",
    "BedrockStreamException",
    "ScriptedBedrock",
    "encode_frame",
    "request_problem",
]

ACCESS_KEY_ID = "AKIDEXAMPLETEST00001"
SECRET_ACCESS_KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
REGION = "us-east-1"
TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
"""ToolSpecification.name in Bedrock's API reference: 1 to 64 characters of [a-zA-Z0-9_-]."""
FRAGMENT_CHARS = 6

_AUTHORIZATION = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=(?P<key>[^/]+)/(?P<date>\d{8})/(?P<region>[^/]+)/(?P<service>[^/]+)/aws4_request, "
    r"SignedHeaders=(?P<signed>[^,]+), Signature=(?P<signature>[0-9a-f]{64})$"
)


@dataclass(frozen=True)
class BedrockReply:
    """The assistant's turn: optional reasoning (text, signature), text, tool uses ``(id, name, input)``."""

    text: str = ""
    tool_uses: tuple[tuple[str, str, dict[str, Any]], ...] = ()
    reasoning: tuple[str, str] | None = None
    stop_reason: str | None = None


@dataclass(frozen=True)
class BedrockError:
    status: int
    error_type: str
    message: str
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class BedrockStreamException:
    """A ConverseStream that starts, sends ``text``, then an exception frame."""

    kind: str
    message: str
    text: str = ""


@dataclass(frozen=True)
class BedrockRaw:
    body: bytes
    status: int = 200
    content_type: str = "application/json"


Script = BedrockReply | BedrockError | BedrockStreamException | BedrockRaw


def _header(name: str, value: str) -> bytes:
    encoded_name, encoded_value = name.encode(), value.encode()
    # Type 7 is a string: 1-byte name length, name, type, 2-byte value length, value.
    return (
        struct.pack("!B", len(encoded_name))
        + encoded_name
        + b"\x07"
        + struct.pack("!H", len(encoded_value))
        + encoded_value
    )


def encode_frame(headers: dict[str, str], payload: bytes) -> bytes:
    """One AWS event-stream message: the framing botocore's ``EventStreamBuffer`` decodes."""
    header_bytes = b"".join(_header(name, value) for name, value in headers.items())
    total = 12 + len(header_bytes) + len(payload) + 4
    prelude = struct.pack("!II", total, len(header_bytes))
    prelude += struct.pack("!I", binascii.crc32(prelude))
    message = prelude + header_bytes + payload
    return message + struct.pack("!I", binascii.crc32(message))


def _event(kind: str, payload: dict[str, Any]) -> bytes:
    headers = {":event-type": kind, ":content-type": "application/json", ":message-type": "event"}
    return encode_frame(headers, json.dumps(payload).encode())


def _pieces(text: str, size: int = FRAGMENT_CHARS) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


class ScriptedBedrock:
    def __init__(self, replies: list[Script] | None = None) -> None:
        self.replies: deque[Script] = deque(replies or [])
        self.requests: list[dict[str, Any]] = []
        """Each request: ``{"model", "action", "body", "headers"}``."""
        self.app = Starlette(
            routes=[
                Route("/model/{model:path}/converse", self._converse, methods=["POST"]),
                Route("/model/{model:path}/converse-stream", self._converse_stream, methods=["POST"]),
            ]
        )

    def push(self, *replies: Script) -> None:
        self.replies.extend(replies)

    # --- requests -----------------------------------------------------------------------------

    async def _converse(self, request: Request) -> Response:
        return await self._answer(request, stream=False)

    async def _converse_stream(self, request: Request) -> Response:
        return await self._answer(request, stream=True)

    async def _answer(self, request: Request, *, stream: bool) -> Response:
        content = await request.body()
        refused = self._check_signature(request, content)
        if refused is not None:
            return refused
        raw_path = request.scope["raw_path"].decode()
        model = unquote(raw_path.split("/model/", 1)[1].rsplit("/", 1)[0])
        self.requests.append(
            {
                "model": model,
                "action": "converse-stream" if stream else "converse",
                "body": json.loads(content),
                "headers": dict(request.headers),
            }
        )
        problem = request_problem(self.requests[-1]["body"], model)
        if problem is not None:
            return JSONResponse(
                {"message": problem}, status_code=400, headers={"x-amzn-ErrorType": "ValidationException"}
            )
        reply = self.replies.popleft()
        if isinstance(reply, BedrockRaw):
            return Response(reply.body, status_code=reply.status, media_type=reply.content_type)
        if isinstance(reply, BedrockError):
            headers = {"x-amzn-ErrorType": f"{reply.error_type}:http://internal.amazon.com/coral/com.amazon.bedrock/"}
            return JSONResponse(
                {"message": reply.message}, status_code=reply.status, headers={**headers, **reply.headers}
            )
        if isinstance(reply, BedrockStreamException):
            frames = [_event("messageStart", {"role": "assistant"})]
            if reply.text:
                frames.append(_event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": reply.text}}))
            exception = {
                ":exception-type": reply.kind,
                ":content-type": "application/json",
                ":message-type": "exception",
            }
            frames.append(encode_frame(exception, json.dumps({"message": reply.message}).encode()))
            return Response(b"".join(frames), media_type="application/vnd.amazon.eventstream")
        if stream:
            return Response(b"".join(self._frames(reply)), media_type="application/vnd.amazon.eventstream")
        return JSONResponse(self._whole(reply))

    def _check_signature(self, request: Request, content: bytes) -> Response | None:
        """Recompute the SigV4 signature over what the request says it signed, as AWS does."""
        match = _AUTHORIZATION.match(request.headers.get("authorization", ""))
        if match is None or match["key"] != ACCESS_KEY_ID:
            return _refuse("UnrecognizedClientException", "The security token included in the request is invalid.")
        signed = match["signed"].split(";")
        if not {"host", "x-amz-date"} <= set(signed) or match["service"] != "bedrock" or match["region"] != REGION:
            return _refuse("InvalidSignatureException", "The request signature does not cover what it must.")
        url = f"{request.url.scheme}://{request.headers['host']}{request.scope['raw_path'].decode()}"
        copy = AWSRequest(method="POST", url=url, data=content, headers={h: request.headers[h] for h in signed})
        copy.context["timestamp"] = request.headers["x-amz-date"]
        signer = SigV4Auth(Credentials(ACCESS_KEY_ID, SECRET_ACCESS_KEY), "bedrock", REGION)
        canonical = signer.canonical_request(copy)
        expected = signer.signature(signer.string_to_sign(copy, canonical), copy)
        if expected != match["signature"]:
            return _refuse("InvalidSignatureException", "The request signature we calculated does not match.")
        return None

    # --- answers ------------------------------------------------------------------------------

    @staticmethod
    def _stop_reason(reply: BedrockReply) -> str:
        return reply.stop_reason or ("tool_use" if reply.tool_uses else "end_turn")

    def _whole(self, reply: BedrockReply) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        if reply.reasoning is not None:
            text, signature = reply.reasoning
            content.append({"reasoningContent": {"reasoningText": {"text": text, "signature": signature}}})
        if reply.text:
            content.append({"text": reply.text})
        for call_id, name, arguments in reply.tool_uses:
            content.append({"toolUse": {"toolUseId": call_id, "name": name, "input": arguments}})
        return {
            "output": {"message": {"role": "assistant", "content": content}},
            "stopReason": self._stop_reason(reply),
            "usage": {"inputTokens": 12, "outputTokens": 7, "totalTokens": 19},
            "metrics": {"latencyMs": 42},
        }

    def _frames(self, reply: BedrockReply) -> list[bytes]:
        frames = [_event("messageStart", {"role": "assistant"})]
        index = 0
        if reply.reasoning is not None:
            text, signature = reply.reasoning
            for piece in _pieces(text):
                delta = {"reasoningContent": {"text": piece}}
                frames.append(_event("contentBlockDelta", {"contentBlockIndex": index, "delta": delta}))
            delta = {"reasoningContent": {"signature": signature}}
            frames.append(_event("contentBlockDelta", {"contentBlockIndex": index, "delta": delta}))
            frames.append(_event("contentBlockStop", {"contentBlockIndex": index}))
            index += 1
        if reply.text:
            for piece in _pieces(reply.text):
                frames.append(_event("contentBlockDelta", {"contentBlockIndex": index, "delta": {"text": piece}}))
            frames.append(_event("contentBlockStop", {"contentBlockIndex": index}))
            index += 1
        for call_id, name, arguments in reply.tool_uses:
            start = {"toolUse": {"toolUseId": call_id, "name": name}}
            frames.append(_event("contentBlockStart", {"contentBlockIndex": index, "start": start}))
            for piece in _pieces(json.dumps(arguments)):
                delta = {"toolUse": {"input": piece}}
                frames.append(_event("contentBlockDelta", {"contentBlockIndex": index, "delta": delta}))
            frames.append(_event("contentBlockStop", {"contentBlockIndex": index}))
            index += 1
        frames.append(_event("messageStop", {"stopReason": self._stop_reason(reply)}))
        usage = {"inputTokens": 12, "outputTokens": 7, "totalTokens": 19}
        frames.append(_event("metadata", {"usage": usage, "metrics": {"latencyMs": 42}}))
        return frames


def request_problem(body: dict[str, Any], model: str = "") -> str | None:
    """The ValidationException Bedrock would answer for this Converse body to ``model``, or ``None`` (the rules a
    translation must keep: alternating turns that start with the user, declared tools, answered calls, tool
    names of Bedrock's pattern, and a temperature of at most 1 for Claude models)."""
    temperature = (body.get("inferenceConfig") or {}).get("temperature")
    if "anthropic.claude" in model and isinstance(temperature, int | float) and temperature > 1:
        return "temperature: range: 0..1"
    for tool in (body.get("toolConfig") or {}).get("tools") or []:
        name = tool["toolSpec"]["name"]
        if not TOOL_NAME.fullmatch(name):
            return (
                f"1 validation error detected: Value '{name}' at 'toolConfig.tools.1.member.toolSpec.name' failed "
                "to satisfy constraint: Member must satisfy regular expression pattern: [a-zA-Z0-9_-]+"
            )
    turns = body.get("messages") or []
    if not turns or turns[0].get("role") != "user":
        return "A conversation must start with a user message."
    for previous, turn in itertools.pairwise(turns):
        if previous["role"] == turn["role"]:
            return "A conversation must alternate between user and assistant roles."
    blocks = [block for turn in turns for block in turn["content"]]
    images = [block["image"] for block in blocks if "image" in block]
    results = [inner for block in blocks if "toolResult" in block for inner in block["toolResult"]["content"]]
    images += [inner["image"] for inner in results if "image" in inner]
    for image in images:
        if image.get("format") not in ("png", "jpeg", "gif", "webp"):
            return (
                f"1 validation error detected: Value '{image.get('format')}' at 'image.format' failed to satisfy "
                "constraint: Member must satisfy enum value set: [gif, jpeg, png, webp]"
            )
        try:
            base64.b64decode((image.get("source") or {}).get("bytes", ""), validate=True)
        except (binascii.Error, ValueError):
            return "Invalid image: the bytes are not valid base64."
    if any("toolUse" in b or "toolResult" in b for b in blocks):
        if "toolConfig" not in body:
            return "The toolConfig field must be defined when using toolUse and toolResult content blocks."
        declared = {tool["toolSpec"]["name"] for tool in body["toolConfig"]["tools"]}
        for block in blocks:
            if "toolUse" in block and block["toolUse"]["name"] not in declared:
                return f"The tool {block['toolUse']['name']} is used but not declared in toolConfig."
    for position, turn in enumerate(turns):
        uses = [b["toolUse"]["toolUseId"] for b in turn["content"] if "toolUse" in b]
        if uses:
            following = turns[position + 1]["content"] if position + 1 < len(turns) else []
            results = [b["toolResult"]["toolUseId"] for b in following if "toolResult" in b]
            if sorted(results) != sorted(uses):
                return (
                    "Expected toolResult blocks at messages."
                    f"{position + 1}.content for the following Ids: {', '.join(uses)}"
                )
    return None


def _refuse(kind: str, message: str) -> Response:
    return JSONResponse({"message": message}, status_code=403, headers={"x-amzn-ErrorType": kind})
