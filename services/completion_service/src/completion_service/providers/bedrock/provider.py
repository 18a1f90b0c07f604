"""``BedrockProvider``: how a call is made (each attempt SigV4-signed by botocore; the shared ``HttpAdapter`` makes
it), and ConverseStream's AWS event-stream frames decoded (botocore's ``EventStreamBuffer``)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import anyio
import httpx
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials, ReadOnlyCredentials
from botocore.eventstream import EventStreamBuffer, ParserError

from completion_service.providers._adapter import HttpAdapter, Outbound
from completion_service.providers._errors import bad_response
from completion_service.providers._transport import Upstream, parse_json
from completion_service.providers.bedrock.errors import translate_error, translate_stream_exception
from completion_service.providers.bedrock.request import PROVIDER_NAME, TOOL_NAMES, build_request_body, request_warnings
from completion_service.providers.bedrock.response import ConverseStreamAssembler, parse_response
from suite_common.errors import ApiError
from suite_common.wire import (
    CompletionEvent,
    CompletionRequest,
    CompletionResponse,
)

__all__ = ["BedrockProvider", "CredentialSource"]

_EVENT_STREAM = "application/vnd.amazon.eventstream"

CredentialSource = Callable[[], ReadOnlyCredentials | None]


class _CredentialChain:
    """botocore's chain (environment, shared profile, container or instance role, web identity), resolved once
    and then refreshed by botocore itself before they expire; not resolved again at every call."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._credentials: Any = None

    def __call__(self) -> ReadOnlyCredentials | None:
        with self._lock:
            if self._credentials is None:  # none found yet: look again (a role may come later)
                import botocore.session

                self._credentials = botocore.session.get_session().get_credentials()
            credentials = self._credentials
        return credentials.get_frozen_credentials() if credentials is not None else None


class BedrockProvider(HttpAdapter):
    """Calls ``{endpoint}/model/{modelId}/converse[-stream]``, each attempt SigV4-signed by botocore."""

    tool_names = TOOL_NAMES
    stream_media_type = _EVENT_STREAM
    image_input = "bytes"  # Converse takes image bytes only: https images are fetched first
    answers_through_tool = True  # Converse has no JSON mode: a response_format is a forced final tool

    def __init__(
        self,
        http: httpx.AsyncClient,
        *,
        region: str,
        endpoint_url: str | None = None,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        session_token: str | None = None,
        credentials: CredentialSource | None = None,
        max_retries: int = 2,
        name: str = PROVIDER_NAME,
    ) -> None:
        self.name = name
        self._region = region
        self._base = (endpoint_url or f"https://bedrock-runtime.{region}.amazonaws.com").rstrip("/")
        if access_key_id and secret_access_key:
            fixed = Credentials(access_key_id, secret_access_key, session_token).get_frozen_credentials()
            self._credentials: CredentialSource = lambda: fixed
        else:
            self._credentials = credentials or _CredentialChain()
        self._upstream = Upstream(
            http,
            provider=name,
            base_url=self._base,
            secrets=[secret_access_key, session_token],
            max_retries=max_retries,
        )

    def _parse(self, body: Any, model: str) -> CompletionResponse:
        return parse_response(body, model, provider=self.name)

    def _decoder(self, model: str) -> _FrameDecoder:
        return _FrameDecoder(ConverseStreamAssembler(model=model, provider=self.name))

    async def _outbound(self, request: CompletionRequest, upstream_model: str, *, stream: bool) -> Outbound:
        # Credentials may come from a role: botocore fetches and refreshes them with blocking I/O.
        credentials = await anyio.to_thread.run_sync(self._credentials)
        if credentials is None:
            raise ApiError(
                502,
                "auth_failed",
                "No AWS credentials for Bedrock: set COMPLETION_AWS_ACCESS_KEY_ID and COMPLETION_AWS_SECRET_ACCESS_KEY "
                "or give the service a role.",
            )
        self._upstream.hide(credentials.secret_key, credentials.token)
        fields = build_request_body(request, provider=self.name, upstream_model=upstream_model)
        warnings = request_warnings(request, fields, upstream_model)
        body = json.dumps(fields, ensure_ascii=False).encode()
        # The model id goes into the path percent-encoded, ':' included, exactly as AWS's SDKs send it.
        url = f"{self._base}/model/{quote(upstream_model, safe='')}/{'converse-stream' if stream else 'converse'}"
        accept = _EVENT_STREAM if stream else "application/json"

        def build() -> httpx.Request:
            signed = AWSRequest(
                method="POST", url=url, data=body, headers={"Content-Type": "application/json", "Accept": accept}
            )
            SigV4Auth(credentials, "bedrock", self._region).add_auth(signed)
            return self._upstream.http.build_request("POST", url, content=body, headers=dict(signed.headers.items()))

        def translate(status: int, content: bytes, headers: httpx.Headers) -> ApiError:
            return translate_error(status, content, headers, upstream_model=upstream_model)

        return Outbound(self._upstream, build, translate, warnings)


class _FrameDecoder:
    """ConverseStream's body, chunk by chunk: AWS event-stream frames (botocore decodes them and checks their
    CRCs) folded by ``ConverseStreamAssembler``."""

    def __init__(self, assembler: ConverseStreamAssembler) -> None:
        self.assembler = assembler
        self.ended = False
        """An exception frame came: its error is raised by ``finish``, after the events of the frames before it."""
        self._frames = EventStreamBuffer()
        self._failure: ApiError | None = None

    def feed(self, piece: Any) -> list[CompletionEvent]:
        """The neutral events of the frames ``piece`` completes, in order, up to an exception frame."""
        self._frames.add_data(piece)
        try:
            messages = list(self._frames)
        except ParserError as error:
            raise bad_response(f"a broken event-stream frame ({type(error).__name__})") from None
        events: list[CompletionEvent] = []
        for message in messages:
            headers = message.headers
            if headers.get(":message-type") in ("exception", "error"):
                kind = str(headers.get(":exception-type") or headers.get(":error-code") or "exception")
                self._failure = translate_stream_exception(kind, message.payload)
                self.ended = True
                break
            events.extend(
                self.assembler.feed(str(headers.get(":event-type", "")), parse_json(message.payload or b"{}"))
            )
        return events

    def finish(self) -> list[CompletionEvent]:
        if self._failure is not None:
            raise self._failure
        return self.assembler.finish()
