"""A run under a cost limit may only use a model with prices, through the real completion-service and its catalog.

Only the LLM is scripted. completion-service's catalog has ``priced`` (with prices), ``backed`` (with prices, falling
back to the unpriced ``openai/gpt-4o``), and routes ``openai/<model>`` without prices. ``acme`` has a monthly cost
budget, ``initech`` one per end user; ``globex`` has no limit at all.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from support import fake_openai
from support.caller_keys import as_caller, key_entry
from support.stacks import Upstreams, running_agent, running_upstreams

pytestmark = pytest.mark.anyio

ACME_KEY = "acme-" + uuid.uuid4().hex
GLOBEX_KEY = "globex-" + uuid.uuid4().hex
INITECH_KEY = "initech-" + uuid.uuid4().hex
PRICES = {"inputPerMillionUsd": 2.5, "outputPerMillionUsd": 10.0}
CATALOG = [
    {"name": "priced", "provider": "openai", "model": "gpt-4o", "prices": PRICES},
    {"name": "backed", "provider": "openai", "model": "gpt-4o", "prices": PRICES, "fallbacks": ["openai/gpt-4o"]},
]


CALLERS_FILE = f"""
[tenants.acme]
monthly_cost_usd = 100

[tenants.initech]
user_monthly_cost_usd = 5

[tenants.globex]

{key_entry("acme-app", "acme", ACME_KEY)}

{key_entry("initech-app", "initech", INITECH_KEY, trusted=True)}

{key_entry("globex-app", "globex", GLOBEX_KEY)}
"""


@pytest.fixture
async def upstreams() -> AsyncIterator[Upstreams]:
    async with running_upstreams(catalog=CATALOG) as running:
        yield running


@pytest.fixture
async def agent(upstreams: Upstreams, tmp_path: Path) -> AsyncIterator[str]:
    callers_file = tmp_path / "callers.toml"
    callers_file.write_text(CALLERS_FILE)
    async with running_agent(
        upstreams.completion_url, upstreams.gateway, database_url="", callers_file=callers_file
    ) as agent_url:
        yield agent_url


def _run(model: str) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "hello"}], "tools": []}


async def test_a_tenant_with_a_cost_budget_may_not_run_an_unpriced_model_but_runs_a_priced_one(
    upstreams: Upstreams, agent: str
) -> None:
    async with httpx.AsyncClient(base_url=agent, timeout=30) as http:
        refused = await http.post("/api/v1/agent/run", json=_run("openai/gpt-4o"), headers=as_caller(ACME_KEY))
        assert refused.status_code == 403, refused.text
        error = refused.json()["error"]
        assert error["code"] == "model_not_priced"
        assert "'openai/gpt-4o' has no price" in error["message"]
        assert "the tenant's monthly_cost_usd" in error["message"]

        fallback = await http.post("/api/v1/agent/run", json=_run("backed"), headers=as_caller(ACME_KEY))
        assert fallback.status_code == 403, fallback.text
        assert fallback.json()["error"]["code"] == "model_not_priced"
        assert "'backed' falls back to one without a price" in fallback.json()["error"]["message"]
        assert "(openai/gpt-4o)" in fallback.json()["error"]["message"]
        assert upstreams.llm.requests == []  # nothing reached the LLM

        upstreams.llm.push(fake_openai.text("priced answer"))
        priced = await http.post("/api/v1/agent/run", json=_run("priced"), headers=as_caller(ACME_KEY))
        assert priced.status_code == 200, priced.text
        usage = priced.json()["usage"]
        assert min(usage["inputTokens"], usage["outputTokens"]) > 0
        expected = (usage["inputTokens"] * 2.5 + usage["outputTokens"] * 10.0) / 1e6
        assert usage["costUsd"] == pytest.approx(expected)

        upstreams.llm.push(fake_openai.text("unpriced answer"))
        unlimited = await http.post("/api/v1/agent/run", json=_run("openai/gpt-4o"), headers=as_caller(GLOBEX_KEY))
        assert unlimited.status_code == 200, unlimited.text  # no cost limit: any model it may run
        assert "costUsd" not in unlimited.json()["usage"]


@pytest.mark.parametrize("headers", [{}, {"X-Agent-Disabled": "true"}])
async def test_the_openai_front_refuses_an_unpriced_model_under_a_cost_budget(
    upstreams: Upstreams, agent: str, headers: dict[str, str]
) -> None:
    async with openai.AsyncOpenAI(
        base_url=f"{agent}/v1", api_key=ACME_KEY, max_retries=0, default_headers=headers
    ) as client:
        with pytest.raises(openai.PermissionDeniedError) as denied:
            await client.chat.completions.create(model="openai/gpt-4o", messages=[{"role": "user", "content": "hi"}])
    assert denied.value.code == "model_not_priced"
    assert upstreams.llm.requests == []


async def test_an_end_users_cost_budget_needs_a_priced_model_only_for_runs_with_an_end_user(
    upstreams: Upstreams, agent: str
) -> None:
    async with httpx.AsyncClient(base_url=agent, timeout=30) as http:
        refused = await http.post(
            "/api/v1/agent/run", json=_run("openai/gpt-4o"), headers=as_caller(INITECH_KEY, "alice")
        )
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"]["code"] == "model_not_priced"
        assert "user_monthly_cost_usd" in refused.json()["error"]["message"]
        chat = {"model": "openai/gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
        refused = await http.post("/v1/chat/completions", json=chat, headers=as_caller(INITECH_KEY, "alice"))
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"]["code"] == "model_not_priced"
        assert upstreams.llm.requests == []

        upstreams.llm.push(fake_openai.text("no end user"))
        anonymous = await http.post("/api/v1/agent/run", json=_run("openai/gpt-4o"), headers=as_caller(INITECH_KEY))
        assert anonymous.status_code == 200, anonymous.text  # no end user: the tenant has no cost limit of its own
