"""Every operation of every service's ``/openapi.json``, fuzzed by schemathesis against the running services.

The three services run for real on loopback ports, under the suite's own uvicorn configuration
(``suite_common.serve.uvicorn_config``): completion-service with the ``demo`` model,
mcp-client-service over a real echo MCP server on stdio, agent-service in front of both; a tenant server is
registered in each (through agent-service's admin API for its tenant ``default``, the open API's, and through the
gateway's tenant API), so that the operations on a server by name read and change one.
Schemathesis loads each document over HTTP and sends what it generates from it (examples,
boundary and invalid values, then random ones) with the checks: no 5xx, and each answer in its
documented status, content type and schema.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from base64 import b64encode
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio.from_thread
import httpx
import pytest
from pydantic import SecretStr

from agent_service.app import create_app as create_agent_app
from agent_service.settings import AgentSettings
from completion_service.app import create_app as create_completion_app
from completion_service.settings import DEFAULT_OPENAI_BASE_URL, CompletionSettings
from suite_common.openapi import OPENAPI_PATH
from suite_common.serve import uvicorn_config
from support.mcp_gateway import GATEWAY_SECRET, echo_stdio_server, running_gateway
from support.servers import serve_app

CHECKS = ["not_a_server_error", "status_code_conformance", "content_type_conformance", "response_schema_conformance"]
EXAMPLES_PER_OPERATION = 10
WARNINGS = [  # every warning of schemathesis is a failure here, but one heuristic (see below)
    "missing_auth",
    "missing_test_data",
    "base_url_mismatch",
    "missing_deserializer",
    "unused_openapi_auth",
    "unsupported_regex",
    "method_not_allowed",
    "unmatched_filter",
    "unresolvable_reference",
    "rate_limited",
    "dictionary_mismatch",
    "timeout_units",
]
"""Left out: ``validation_mismatch`` and ``low_valid_rate``, which count the share of generated bodies answered
4xx. ``POST /v1/chat/completions`` takes OpenAI's request shape, whose unions (``tool_choice``, a message's
``content``) and enums make most generated bodies ones the front refuses with a 400 as OpenAI would; the checks
above still hold every answer to its documented status, type and schema."""


CONVERSATION_ID = "fuzz-conversation"
_CONVERSATION_RUN = {
    "model": "demo",
    "messages": [{"role": "user", "content": "hello"}],
    "conversationId": CONVERSATION_ID,
}
_IMAGE = b"\x89PNG\r\n\x1a\n fuzzed"
_IMAGE_RUN = {
    "model": "demo",
    "messages": [
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": "data:image/png;base64," + b64encode(_IMAGE).decode()}}
            ],
        }
    ],
}
FUZZ_TENANT, FUZZ_SERVER = "fuzz", "fuzzed"


def _agent_config(run_id: str) -> str:
    """``run_id``: a run the suite stored before fuzzing, whose approvals and inputs are then answered (409: none
    pending), not only 404s for made-up ids."""
    return (
        f"""
[[operations]]
include-name = "POST /api/v1/agent/runs/{{runId}}/approvals"
parameters = {{ runId = "{run_id}" }}

[[operations]]
include-name = "POST /api/v1/agent/runs/{{runId}}/inputs"
parameters = {{ runId = "{run_id}" }}
"""
        + _AGENT_CONFIG
    )


_AGENT_CONFIG = (
    f"""
# The conversation the suite stored before fuzzing: reading it, not only 404s for made-up ids.
[[operations]]
include-name = "GET /api/v1/agent/conversations/{{conversationId}}"
parameters = {{ conversationId = "{CONVERSATION_ID}" }}

# The image of a run the suite stored before fuzzing: served, not only 404s for made-up ones.
[[operations]]
include-name = "GET /api/v1/agent/images/{{sha256}}"
parameters = {{ sha256 = "{hashlib.sha256(_IMAGE).hexdigest()}" }}
"""
    + "".join(
        f"""
# The server tenant ``default`` (the open API's) registered through the admin API before fuzzing.
[[operations]]
include-name = "{method} /api/v1/admin/mcp-servers/{{name}}"
parameters = {{ name = "{FUZZ_SERVER}" }}
"""
        for method in ("GET", "PATCH", "DELETE")
    )
    + f"""
# Its first DELETE deletes it: every later one is a 404 (the name is the only parameter). Every other warning holds.
warnings = {json.dumps([warning for warning in WARNINGS if warning != "missing_test_data"])}
"""
    + f"""
# A person's own connections: the open API's caller naming an end user (without one: 403 user_required).
[[operations]]
include-name = "GET /api/v1/agent/connections"
headers = {{ "X-User-Id" = "fuzz-user" }}

# The same server, for a person's consent (400 not_oauth, then 404s).
[[operations]]
include-name = "POST /api/v1/agent/connections/{{server}}/authorize"
headers = {{ "X-User-Id" = "fuzz-user" }}
parameters = {{ server = "{FUZZ_SERVER}" }}
warnings = {json.dumps([warning for warning in WARNINGS if warning != "missing_test_data"])}

# Nobody connected anything here: every revocation is a 404 connection_not_found.
[[operations]]
include-name = "DELETE /api/v1/agent/connections/{{server}}"
headers = {{ "X-User-Id" = "fuzz-user" }}
warnings = {json.dumps([warning for warning in WARNINGS if warning != "missing_test_data"])}

# The server registered before fuzzing: not behind OAuth, so a consent is refused (400 not_oauth), until the
# fuzzing of its DELETE removes it (404s then).
[[operations]]
include-name = "POST /api/v1/admin/mcp-servers/{{name}}/authorize"
parameters = {{ name = "{FUZZ_SERVER}" }}
warnings = {json.dumps([warning for warning in WARNINGS if warning != "missing_test_data"])}
"""
)
_GATEWAY_CONFIG = (
    "".join(
        f"""
# A tenant server the suite registered before fuzzing: reading and changing it, not only 404s for made-up names.
[[operations]]
include-name = "{method} /mcp/v1/tenants/{{tenant}}/servers/{{name}}"
parameters = {{ tenant = "{FUZZ_TENANT}", name = "{FUZZ_SERVER}" }}
"""
        for method in ("GET", "PATCH", "DELETE")
    )
    + "".join(
        f"""
# A question waits, and a call can be followed again, only while a call of a tool that asks one runs: every id made
# up here is unknown, and the 404 is what is checked. Every other warning holds.
[[operations]]
include-name = "{operation}"
warnings = {json.dumps([warning for warning in WARNINGS if warning != "missing_test_data"])}
"""
        for operation in ("POST /mcp/v1/elicitations/{elicitation_id}", "GET /mcp/v1/calls/{call_id}/events")
    )
    + f"""
# A consent is asked for a server named in the body: the made-up names are unknown (404 server_not_found), which is
# what is checked; the consents of real servers are the OAuth tests'. Every other warning holds.
[[operations]]
include-name = "POST /mcp/v1/oauth/authorize"
warnings = {json.dumps([warning for warning in WARNINGS if warning != "missing_test_data"])}
"""
)


@dataclass(frozen=True)
class Suite:
    agent_url: str
    completion_url: str
    mcp_url: str
    run_id: str
    """A run stored before fuzzing."""


@asynccontextmanager
async def _running_suite() -> AsyncIterator[Suite]:
    completion_settings = CompletionSettings(
        openai_api_key=None, openai_base_url=DEFAULT_OPENAI_BASE_URL, demo_enabled=True
    )
    completion_app = create_completion_app(completion_settings)
    async with (
        serve_app(completion_app, config=uvicorn_config(completion_app, completion_settings)) as completion_url,
        running_gateway({"echo": {**echo_stdio_server("echo"), "allowedTools": ["echo", "add", "fail"]}}) as gateway,
    ):
        await gateway.wait_until_ready("echo")
        registered = await gateway.http.post(
            f"/mcp/v1/tenants/{FUZZ_TENANT}/servers", json={"name": FUZZ_SERVER, "url": "http://127.0.0.1:9/mcp"}
        )
        assert registered.status_code == 201, registered.text
        agent_settings = AgentSettings(
            completion_url=completion_url,
            mcp_client_url=gateway.url,
            mcp_service_secret=SecretStr(GATEWAY_SECRET),
            default_model="demo",  # a run request without a model is then a run, as in a deployment with a default
        )
        agent_app = create_agent_app(agent_settings)
        async with serve_app(agent_app, config=uvicorn_config(agent_app, agent_settings)) as agent_url:
            async with httpx.AsyncClient(base_url=agent_url, timeout=30) as client:
                started = await client.post("/api/v1/agent/run", json=_CONVERSATION_RUN)
                assert started.status_code == 200, started.text
                with_image = await client.post("/api/v1/agent/run", json=_IMAGE_RUN)
                assert with_image.status_code == 200, with_image.text
                server = {"name": FUZZ_SERVER, "url": "http://127.0.0.1:9/mcp"}
                registered = await client.post("/api/v1/admin/mcp-servers", json=server)
                assert registered.status_code == 201, registered.text
            run_id = started.json()["runId"]
            yield Suite(agent_url=agent_url, completion_url=completion_url, mcp_url=gateway.url, run_id=run_id)


@pytest.fixture(scope="module")
def suite() -> Iterator[Suite]:
    """The services in an event loop of their own thread: schemathesis calls them synchronously."""
    with (
        anyio.from_thread.start_blocking_portal(backend="asyncio") as portal,
        portal.wrap_async_context_manager(_running_suite()) as running,
    ):
        yield running


def _fuzz(workdir: Path, openapi_url: str, *headers: str) -> subprocess.Popen[str]:
    """schemathesis's command line over every operation of the document at ``openapi_url``.

    In ``workdir``: it keeps a cache of the failures it found there (``.schemathesis``), replayed on
    the next run; each run starts from none, so that its seed alone decides what it sends.
    """
    command = [
        *(sys.executable, "-m", "schemathesis.cli", "run", openapi_url),
        *("--checks", ",".join(CHECKS)),
        *("--phases", "examples,coverage,fuzzing"),
        *("--max-examples", str(EXAMPLES_PER_OPERATION)),
        *("--request-timeout", "30", "--seed", "12", "--generation-database", "none"),
        *("--warnings", ",".join(WARNINGS)),
        *(item for header in headers for item in ("--header", header)),
    ]
    return subprocess.Popen(command, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.mark.timeout(240)  # about 25 s of CPU in all; on a loaded 2-core machine, a minute or more of wall time
def test_every_operation_of_every_service_answers_as_documented_and_never_with_a_5xx(
    suite: Suite, tmp_path: Path
) -> None:
    services = ("agent-service", "completion-service", "mcp-client-service")
    workdirs = {service: tmp_path / service for service in services}
    for workdir in workdirs.values():
        workdir.mkdir()
    (workdirs["agent-service"] / "schemathesis.toml").write_text(
        _agent_config(suite.run_id)
    )  # read from the working directory
    (workdirs["mcp-client-service"] / "schemathesis.toml").write_text(_GATEWAY_CONFIG)
    secret = f"X-MCP-Service-Secret: {GATEWAY_SECRET}"
    runs = {  # side by side: each service is fuzzed by its own process
        "agent-service": _fuzz(workdirs["agent-service"], suite.agent_url + OPENAPI_PATH),
        "completion-service": _fuzz(workdirs["completion-service"], suite.completion_url + OPENAPI_PATH),
        "mcp-client-service": _fuzz(workdirs["mcp-client-service"], suite.mcp_url + OPENAPI_PATH, secret),
    }
    reports = {service: run.communicate(timeout=200)[0] for service, run in runs.items()}

    failed = {service: reports[service][-20000:] for service, run in runs.items() if run.returncode != 0}
    assert not failed, "\n\n".join(f"=== {service}\n{report}" for service, report in failed.items())
    for service, report in reports.items():
        assert "No issues found" in report, f"=== {service}\n{report[-20000:]}"  # a warning exits 0
