"""The bench's production arm (bench/production.py): the configuration it starts agent-service with is what production
runs (checked with the service's own settings and callers-file parser), its runs' tool calls are new each run, its
targets say PASS and MISS where the issue's numbers put them, and the peer arm says why it is left out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent_service.access.callers_file import parse_callers
from agent_service.engine.tool_cache import ToolCachePolicy
from agent_service.settings import AgentSettings
from bench.fake_llm import reply_for
from bench.limits import BENCH_KEY, TENANCY_CALLERS
from bench.peers import missing_peers_venv
from bench.production import (
    USER_HEADERS,
    ArmCost,
    fresh_user_texts,
    production_env,
    production_targets,
)
from bench.suite import STDIO_TOOL
from suite_common.wire import ToolInfo


def test_the_callers_file_gives_the_runs_key_a_tenant_with_every_control_on() -> None:
    callers = parse_callers(TENANCY_CALLERS)
    caller = callers.identify(USER_HEADERS["Authorization"].removeprefix("Bearer "))
    assert caller is not None
    assert caller.tenant == "bench"
    assert caller.trusted  # so that the run's X-User-Id names its end user, whose budget counts too
    rules = callers.rules_of("bench")
    assert rules.max_concurrent_runs is not None
    assert rules.max_run_tokens is not None
    assert rules.monthly_tokens is not None
    assert rules.user_monthly_tokens is not None
    assert callers.identify(BENCH_KEY + "x") is None


def test_the_production_settings_store_in_postgresql_share_redis_and_cache_the_echo_tool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = production_env(
        database_url="postgresql://postgres@127.0.0.1:5432/loopsuite_bench_x",
        redis_url="redis://127.0.0.1:6379/0",
        key_prefix="bench-1234:",
        callers_file=tmp_path / "callers.toml",
        pepper="p" * 64,
    )
    for name, value in {**env, "AGENT_MCP_SERVICE_SECRET": "s3cret"}.items():
        monkeypatch.setenv(name, value)
    settings = AgentSettings()
    assert settings.database_url.startswith("postgresql://")
    assert settings.redis_url == "redis://127.0.0.1:6379/0"
    assert settings.max_concurrent_runs_per_tenant > 0
    assert settings.callers_file == tmp_path / "callers.toml"
    assert settings.tool_cache_on
    # The run's tool, as the suite's gateway lists it (the stdio echo server of bench/suite.py), is cached.
    policy = ToolCachePolicy(settings.tool_cache_seconds, dict(settings.tool_cache_ttls))
    echo = ToolInfo(name=STDIO_TOOL, input_schema={"type": "object"}, server="echo-stdio")
    assert policy.ttl(echo) > 0


def test_each_run_calls_its_tools_with_arguments_of_its_own() -> None:
    user_text = fresh_user_texts()
    texts = [user_text() for _ in range(3)]
    assert len(set(texts)) == 3
    tools = [{"type": "function", "function": {"name": STDIO_TOOL}}]

    def first_call(model: str, text: str) -> str:
        message, _, _ = reply_for({"model": model, "messages": [{"role": "user", "content": text}], "tools": tools})
        return str(json.loads(message["tool_calls"][0]["function"]["arguments"])["text"])

    assert len({first_call("rounds-3-fresh", text) for text in texts}) == 3
    # Without -fresh the script's calls are the same for every run, as the other benchmarks have them.
    assert {first_call("rounds-3", text) for text in texts} == {"round 0"}


def test_the_production_target_passes_within_1_3x_of_bare_and_misses_beyond() -> None:
    bare = ArmCost(p50=0.010, cpu=0.010)
    (within,) = production_targets(bare, ArmCost(p50=0.012, cpu=0.013), None)
    (beyond,) = production_targets(bare, ArmCost(p50=0.012, cpu=0.0131), None)
    assert within.verdict == "PASS"
    assert within.measured.startswith("1.30x (13.00 / 10.00 ms")
    assert beyond.verdict == "MISS"


def test_against_the_peer_the_production_arm_must_be_twice_as_cheap_and_faster() -> None:
    bare = ArmCost(p50=0.010, cpu=0.010)
    production = ArmCost(p50=0.015, cpu=0.015)
    _, cpu, latency = production_targets(bare, production, ArmCost(p50=0.020, cpu=0.030))
    assert (cpu.verdict, latency.verdict) == ("PASS", "PASS")
    assert cpu.measured.startswith("2.00x cheaper")
    _, cpu, latency = production_targets(bare, production, ArmCost(p50=0.015, cpu=0.0299))
    assert (cpu.verdict, latency.verdict) == ("MISS", "MISS")


def test_the_peer_arm_says_how_to_make_its_environment_until_it_is_complete(tmp_path: Path) -> None:
    venv = tmp_path / ".data" / "bench" / "peers-venv"
    assert "make bench-peers" in (missing_peers_venv(venv) or "")
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").touch()
    assert missing_peers_venv(venv) is not None  # pip has not finished: no stamp yet
    (venv / ".installed").touch()
    assert missing_peers_venv(venv) is None
