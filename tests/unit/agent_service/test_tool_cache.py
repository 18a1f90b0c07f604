"""The tool-result cache on its own (keys, TTL rules, signing, the in-memory store, its settings), then in the loop
against scripted services. Against the real Redis and MCP servers: tests/integration/agent_service/test_tool_cache.py.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from prometheus_client import CollectorRegistry
from pydantic import SecretStr, ValidationError

from agent_service.core.limits import RunLimits
from agent_service.core.run import RunPlan
from agent_service.engine.loop import AgentLoop
from agent_service.engine.tool_cache import (
    MemoryStore,
    ToolCache,
    ToolCachePolicy,
    canonical_arguments,
    open_tool_cache,
    sign,
)
from agent_service.infra.telemetry import RunTelemetry
from agent_service.settings import AgentSettings
from suite_common.deadline import Deadline
from suite_common.wire import CallerContext, Message, RunEvent, RunToolResult, ToolInfo, UserRole
from support.scripted import Scripted, answer, call_tools

pytestmark = pytest.mark.anyio

PEPPER = b"pepper-one"


def who(tenant: str, user: str | None = None, role: UserRole | None = None) -> CallerContext:
    """Whom a run's calls act for: the cache keeps its results apart by tenant, user and role."""
    return CallerContext(tenant=tenant, user=user, role=role, run_id="run_1")


def tool(name: str = "lookup", server: str = "s", *, read_only: bool = True) -> ToolInfo:
    return ToolInfo(
        name=name,
        input_schema={"type": "object"},
        server=server,
        annotations={"readOnlyHint": True} if read_only else {"idempotentHint": True},
    )


def cache(
    *,
    seconds: float = 60,
    ttls: dict[str, float] | None = None,
    pepper: bytes = PEPPER,
    store: MemoryStore | None = None,
) -> ToolCache:
    policy = ToolCachePolicy(seconds, ttls or {})
    return ToolCache(
        policy,
        store if store is not None else MemoryStore(100),
        pepper,
        key_prefix="p:",
        telemetry=RunTelemetry.disabled(),
    )


def counted(registry: CollectorRegistry) -> dict[str, float]:
    return {
        outcome: registry.get_sample_value("agent_tool_cache_total", {"outcome": outcome}) or 0.0
        for outcome in ("hit", "miss", "store", "rejected", "error")
    }


# --- identical calls ------------------------------------------------------------------------------------------


def test_canonical_arguments_ignore_key_order_and_whitespace_but_not_values() -> None:
    assert canonical_arguments({"b": [1, {"y": 2, "x": 1}], "a": "é"}) == '{"a":"é","b":[1,{"x":1,"y":2}]}'
    assert canonical_arguments({"a": 1, "b": 2}) == canonical_arguments({"b": 2, "a": 1})
    assert canonical_arguments({"a": 1}) != canonical_arguments({"a": "1"})


def test_a_key_names_tenant_server_tool_and_arguments_and_nothing_else() -> None:
    keys = cache()
    key = keys.key(who("acme"), "s", "lookup", {"q": "x", "n": 1})
    assert key.startswith("p:tool-cache:")
    assert len(key.removeprefix("p:tool-cache:")) == 64  # a sha256: no tenant or argument in Redis's key space
    assert key == keys.key(who("acme"), "s", "lookup", {"n": 1, "q": "x"})
    others = {
        keys.key(who("globex"), "s", "lookup", {"q": "x", "n": 1}),
        keys.key(who("acme"), "t", "lookup", {"q": "x", "n": 1}),
        keys.key(who("acme"), "s", "other", {"q": "x", "n": 1}),
        keys.key(who("acme"), "s", "lookup", {"q": "x", "n": 2}),
        keys.key(who("acme"), "s:lookup", "", {"q": "x", "n": 1}),  # no joining of parts that could collide
    }
    assert key not in others
    assert len(others) == 5


# --- what is cached, for how long -----------------------------------------------------------------------------


def test_only_read_only_tools_get_the_default_ttl() -> None:
    policy = ToolCachePolicy(30, {})
    assert policy.ttl(tool(read_only=True)) == 30
    assert policy.ttl(tool(read_only=False)) == 0
    assert policy.ttl(ToolInfo(name="bare", input_schema={}, server="s")) == 0  # no annotations at all
    assert ToolCachePolicy(0, {}).ttl(tool(read_only=True)) == 0


def test_a_pattern_caches_a_tool_without_read_only_and_the_most_specific_pattern_wins() -> None:
    policy = ToolCachePolicy(30, {"web:*": 60, "fetch_url": 5, "web:fetch_url": 0, "set_status": 10})
    assert policy.ttl(tool("search", "web", read_only=False)) == 60  # <server>:*
    assert policy.ttl(tool("fetch_url", "other", read_only=True)) == 5  # the name, on any server
    assert policy.ttl(tool("fetch_url", "web", read_only=True)) == 0  # <server>:<tool> wins; 0 disables
    assert policy.ttl(tool("set_status", "ledger", read_only=False)) == 10
    assert policy.ttl(tool("get_status", "ledger", read_only=True)) == 30  # named by no pattern: the default
    assert policy.ttl(tool("get_status", "ledger", read_only=False)) == 0


def _settings(**values: Any) -> AgentSettings:
    return AgentSettings(mcp_service_secret=SecretStr("s"), **values)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("{not json", "must be a JSON object"),
        ("[1, 2]", "valid dictionary"),
        ('{"a:b:c": 5}', "'a:b:c' is not a tool name, '<server>:<tool>' or '<server>:*'"),
        ('{"web:": 5}', "is not a tool name"),
        ('{"echo": -1}', "greater than or equal to 0"),
        ('{"echo": "soon"}', "valid number"),
    ],
)
def test_bad_ttls_refuse_the_start_with_the_setting_named(
    value: str, problem: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENT_TOOL_CACHE_TTLS", value)
    with pytest.raises(ValidationError) as refused:
        _settings()
    assert problem in str(refused.value)
    assert "tool_cache_ttls" in str(refused.value)


def test_ttls_read_from_the_environment_and_a_negative_default_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_TOOL_CACHE_TTLS", '{"web:*": 60, "echo": 1.5}')
    assert _settings().tool_cache_ttls == {"web:*": 60, "echo": 1.5}
    with pytest.raises(ValidationError):
        _settings(tool_cache_seconds=-1)


def test_with_redis_the_cache_on_needs_a_pepper_every_replica_shares() -> None:
    with pytest.raises(ValidationError) as refused:
        _settings(redis_url="redis://127.0.0.1:6379/0", tool_cache_seconds=30)
    assert "AGENT_TOOL_CACHE_PEPPER must be set" in str(refused.value)
    with pytest.raises(ValidationError):
        _settings(redis_url="redis://127.0.0.1:6379/0", tool_cache_ttls={"echo": 5}, tool_cache_pepper=SecretStr(" "))
    _settings(redis_url="redis://127.0.0.1:6379/0", tool_cache_seconds=30, tool_cache_pepper=SecretStr("p" * 32))
    with pytest.raises(ValidationError) as short:  # a guessable pepper is no protection against a Redis writer
        _settings(redis_url="redis://127.0.0.1:6379/0", tool_cache_seconds=30, tool_cache_pepper=SecretStr("p" * 31))
    assert "at least 32 characters (got 31)" in str(short.value)
    _settings(redis_url="redis://127.0.0.1:6379/0")  # the cache off: no pepper needed
    _settings(tool_cache_seconds=30)  # in memory: a random pepper of the process's own


def test_the_cache_is_off_by_default_and_on_in_memory_with_a_ttl() -> None:
    assert open_tool_cache(_settings(), None) is None
    assert open_tool_cache(_settings(tool_cache_ttls={"echo": 0}), None) is None
    on = open_tool_cache(_settings(tool_cache_seconds=30), None)
    assert on is not None
    assert isinstance(on.store, MemoryStore)


# --- signing --------------------------------------------------------------------------------------------------


async def test_a_stored_result_is_served_to_the_same_call_only() -> None:
    results = cache()
    await results.remember(who("acme"), tool(), {"q": "x", "n": 1}, "the result")
    assert await results.lookup(who("acme"), tool(), {"n": 1, "q": "x"}) == "the result"
    assert await results.lookup(who("globex"), tool(), {"n": 1, "q": "x"}) is None
    assert await results.lookup(who("acme"), tool(server="t"), {"n": 1, "q": "x"}) is None
    assert await results.lookup(who("acme"), tool(), {"q": "y", "n": 1}) is None


async def test_a_result_is_never_served_to_another_end_user_nor_to_another_role() -> None:
    results = cache()
    await results.remember(who("acme", "alice", "user"), tool(), {"q": "x"}, "alice's result")
    assert await results.lookup(who("acme", "alice", "user"), tool(), {"q": "x"}) == "alice's result"
    assert await results.lookup(who("acme", "bob", "user"), tool(), {"q": "x"}) is None
    assert await results.lookup(who("acme", "alice", "guest"), tool(), {"q": "x"}) is None
    assert await results.lookup(who("acme"), tool(), {"q": "x"}) is None


async def test_a_forged_value_a_moved_value_and_one_signed_with_another_pepper_are_all_rejected() -> None:
    registry = CollectorRegistry()
    store = MemoryStore(100)
    results = cache(store=store)
    results.telemetry = RunTelemetry(registry, trace.NoOpTracer())
    key = results.key(who("acme"), "s", "lookup", {"q": "x"})
    other = results.key(who("globex"), "s", "lookup", {"q": "x"})

    await store.set(key, b"v1." + b"0" * 64 + b".a forged result", 60)  # no pepper: a guessed MAC
    assert await results.lookup(who("acme"), tool(), {"q": "x"}) is None
    await store.set(key, sign(PEPPER, other, "globex's result"), 60)  # signed for another key, moved here
    assert await results.lookup(who("acme"), tool(), {"q": "x"}) is None
    await store.set(key, sign(b"the old pepper", key, "stale"), 60)  # rotated pepper
    assert await results.lookup(who("acme"), tool(), {"q": "x"}) is None
    valid = sign(PEPPER, key, "the result")
    await store.set(key, valid.replace(b"the result", b"the resulT"), 60)  # a value edited after signing
    assert await results.lookup(who("acme"), tool(), {"q": "x"}) is None
    for garbage in (b"", b"v1", b"v2" + valid[2:], b"v1." + valid[3:67], b"\xff\xfe"):
        await store.set(key, garbage, 60)
        assert await results.lookup(who("acme"), tool(), {"q": "x"}) is None

    await store.set(key, valid, 60)
    assert await results.lookup(who("acme"), tool(), {"q": "x"}) == "the result"
    assert counted(registry) == {"hit": 1, "miss": 0, "store": 0, "rejected": 9, "error": 0}


async def test_a_tool_the_policy_does_not_cache_is_neither_stored_nor_looked_up() -> None:
    store = MemoryStore(100)
    results = cache(seconds=60, ttls={"s:lookup": 0}, store=store)
    await results.remember(who("acme"), tool(), {"q": "x"}, "r")
    await results.remember(who("acme"), tool("other", read_only=False), {"q": "x"}, "r")
    assert len(store) == 0
    assert await results.lookup(who("acme"), tool(), {"q": "x"}) is None


async def test_a_tenants_tool_cache_seconds_shortens_a_results_lifetime_and_zero_turns_the_cache_off() -> None:
    store = MemoryStore(100)
    results = cache(seconds=60, store=store)
    assert results.ttl(tool(), 10) == 10
    assert results.ttl(tool(), 600) == 60  # a tenant never lengthens the operator's lifetime
    assert results.ttl(tool("other", read_only=False), 10) == 0  # nor caches a tool the policy does not

    await results.remember(who("acme"), tool(), {"q": "x"}, "r", max_seconds=0)
    assert len(store) == 0
    await results.remember(who("acme"), tool(), {"q": "x"}, "r")
    assert await results.lookup(who("acme"), tool(), {"q": "x"}, max_seconds=0) is None
    assert await results.lookup(who("acme"), tool(), {"q": "x"}, max_seconds=5) == "r"


# --- the in-memory store --------------------------------------------------------------------------------------


async def test_the_memory_store_expires_values_and_drops_the_least_recently_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [1000.0]
    monkeypatch.setattr("agent_service.engine.tool_cache.time.monotonic", lambda: now[0])
    store = MemoryStore(2)
    await store.set("a", b"1", 10)
    await store.set("b", b"2", 10)
    assert await store.get("a") == b"1"  # a is now the most recently used
    await store.set("c", b"3", 10)
    assert (await store.get("a"), await store.get("b"), await store.get("c")) == (b"1", None, b"3")
    now[0] += 10
    assert await store.get("a") is None
    assert len(store) == 1  # expired on read


# --- in the loop ----------------------------------------------------------------------------------------------


def _loop_with_cache(scripted: Scripted, results: ToolCache) -> AgentLoop:
    loop = scripted.loop()
    loop.dispatch.tool_cache = results
    return loop


def plan(name: str, *, read_only: bool = True) -> RunPlan:
    return RunPlan(
        run_id="run_test",
        model="scripted",
        messages=[Message(role="user", content="question")],
        tools=[tool(name, read_only=read_only)],
        tool_choice="auto",
        limits=RunLimits(max_iterations=5, deadline=Deadline.after(10)),
        tenant="acme",
    )


class Recorder:
    def __init__(self) -> None:
        self.events: list[RunEvent] = []

    async def __call__(self, event: RunEvent) -> None:
        self.events.append(event)

    def results(self) -> list[RunToolResult]:
        return [event for event in self.events if isinstance(event, RunToolResult)]


async def test_the_second_identical_call_is_answered_from_the_cache_with_cached_true_and_the_same_content() -> None:
    calls: list[dict[str, Any]] = []

    async def echo(arguments: dict[str, Any]) -> str:
        calls.append(arguments)
        return f"echo {arguments['q']}"

    scripted = Scripted(
        [
            call_tools(("c1", "echo", {"q": "a", "n": 1})),
            call_tools(("c2", "echo", {"n": 1, "q": "a"}), ("c3", "echo", {"q": "b", "n": 1})),
            answer("ok"),
        ],
        {"echo": echo},
    )
    events = Recorder()
    registry, spans, provider = CollectorRegistry(), InMemorySpanExporter(), TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    loop = _loop_with_cache(scripted, cache())
    telemetry = RunTelemetry(registry, provider.get_tracer("test"))
    loop.telemetry = loop.dispatch.telemetry = loop.dispatch.tool_cache.telemetry = telemetry  # type: ignore[union-attr]
    outcome = await loop.run(plan("echo"), events, stream_text=True)
    assert outcome.finish_reason == "stop"
    assert calls == [{"q": "a", "n": 1}, {"q": "b", "n": 1}]  # c2 was never dispatched
    results = {event.tool_call_id: event for event in events.results()}
    assert results["c1"].cached is None
    assert results["c2"].cached is True
    assert results["c2"].content == results["c1"].content == "echo a"
    assert not results["c2"].is_error
    assert results["c3"].cached is None
    assert scripted.completion_requests[2]["messages"][-2]["content"] == "echo a"  # what the model saw
    assert counted(registry) == {"hit": 1, "miss": 2, "store": 2, "rejected": 0, "error": 0}
    calls_counted = {"server": "s", "tool": "echo"}
    assert registry.get_sample_value("agent_tool_calls_total", {**calls_counted, "status": "cached"}) == 1
    assert registry.get_sample_value("agent_tool_calls_total", {**calls_counted, "status": "ok"}) == 2
    tool_spans = [span for span in spans.get_finished_spans() if span.name == "tool_call"]
    assert sorted(str(span.attributes["tool.status"]) for span in tool_spans if span.attributes) == [
        "cached",
        "ok",
        "ok",
    ]
    assert {span.status.status_code for span in tool_spans} == {StatusCode.UNSET}  # a hit is no failure


async def test_a_run_of_a_tenant_that_turned_the_cache_off_calls_the_tool_every_time() -> None:
    calls: list[str] = []

    async def echo(arguments: dict[str, Any]) -> str:
        calls.append(arguments["q"])
        return "echo"

    scripted = Scripted(
        [call_tools(("c1", "echo", {"q": "a"})), call_tools(("c2", "echo", {"q": "a"})), answer("ok")], {"echo": echo}
    )
    store = MemoryStore(100)
    off = replace(plan("echo"), tool_cache_seconds=0)
    await _loop_with_cache(scripted, cache(store=store)).run(off, Recorder(), stream_text=False)
    assert calls == ["a", "a"]
    assert len(store) == 0


async def test_an_error_result_is_never_cached() -> None:
    attempts: list[str] = []

    async def flaky(arguments: dict[str, Any]) -> str:
        attempts.append(arguments["q"])
        raise RuntimeError("not now")

    scripted = Scripted(
        [call_tools(("c1", "flaky", {"q": "a"})), call_tools(("c2", "flaky", {"q": "a"})), answer("ok")],
        {"flaky": flaky},
    )
    events = Recorder()
    await _loop_with_cache(scripted, cache()).run(plan("flaky"), events, stream_text=False)
    assert attempts == ["a", "a"]
    assert [event.cached for event in events.results()] == [None, None]


async def test_a_tool_without_read_only_is_called_every_time() -> None:
    calls: list[str] = []

    async def echo(arguments: dict[str, Any]) -> str:
        calls.append(arguments["q"])
        return "r"

    scripted = Scripted(
        [call_tools(("c1", "echo", {"q": "a"})), call_tools(("c2", "echo", {"q": "a"})), answer("ok")],
        {"echo": echo},
    )
    await _loop_with_cache(scripted, cache()).run(plan("echo", read_only=False), Recorder(), stream_text=False)
    assert calls == ["a", "a"]


async def test_a_failed_dispatch_is_never_cached() -> None:
    store = MemoryStore(100)
    scripted = Scripted(
        [call_tools(("c1", "echo", {"q": "a"})), call_tools(("c2", "echo", {"q": "a"})), answer("ok")],
        {"echo": echo_tool},
        stream_errors={"echo": ("tool_unavailable", "The server is restarting.")},  # the gateway's, not the tool's
    )
    events = Recorder()
    await _loop_with_cache(scripted, cache(store=store)).run(plan("echo"), events, stream_text=True)
    assert [(event.is_error, event.cached) for event in events.results()] == [(True, None), (True, None)]
    assert len(scripted.tool_calls) == 2
    assert len(store) == 0


async def echo_tool(arguments: dict[str, Any]) -> str:
    return f"echo {arguments['q']}"


async def test_a_result_from_another_server_than_the_planned_one_is_not_cached_under_the_planned_one() -> None:
    # A gateway that ignored the call's server (one from before call-tool took it) ran it on "s", not on "planned".
    store = MemoryStore(100)
    scripted = Scripted(
        [call_tools(("c1", "echo", {"q": "a"})), call_tools(("c2", "echo", {"q": "a"})), answer("ok")],
        {"echo": echo_tool},
    )
    registry = CollectorRegistry()
    loop = _loop_with_cache(scripted, cache(store=store))
    loop.telemetry = loop.dispatch.telemetry = RunTelemetry(registry, TracerProvider().get_tracer("test"))
    moved = replace(plan("echo"), tools=[tool("echo", "planned")])
    await loop.run(moved, Recorder(), stream_text=False)
    assert len(scripted.tool_calls) == 2  # the second was not served from the first's result
    assert len(store) == 0
    assert registry.get_sample_value("agent_tool_calls_total", {"server": "s", "tool": "echo", "status": "ok"}) == 2


def test_a_pattern_names_a_renamed_tool_by_its_listed_or_its_servers_own_name() -> None:
    policy = ToolCachePolicy(0, {"echo-b:whoami": 60, "c_pid": 30})
    renamed = ToolInfo(name="echo-b__whoami", server="echo-b", server_tool="whoami", input_schema={})
    prefixed = ToolInfo(name="c_pid", server="echo-c", server_tool="pid", input_schema={})
    assert (policy.ttl(renamed), policy.ttl(prefixed)) == (60, 30)
