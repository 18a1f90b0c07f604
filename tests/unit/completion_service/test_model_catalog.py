"""The model catalog: where it is read from, how credentials are referenced, what is refused at start-up."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from pydantic import SecretStr

from completion_service.catalog import CatalogError, load_catalog, resolve_secret
from completion_service.routing import build_router
from completion_service.settings import CompletionSettings
from suite_common.wire import CompletionRequest, Message


def test_entries_come_from_the_json_setting_then_from_a_toml_file(tmp_path: Path) -> None:
    toml = tmp_path / "models.toml"
    toml.write_text('[[models]]\nname = "fast"\nprovider = "openai"\nmodel = "gpt-4o-mini"\nfallbacks = ["demo"]\n')
    inline = json.dumps([{"name": "smart", "provider": "anthropic", "model": "claude-sonnet-4-5"}])
    entries = load_catalog(inline, toml)
    assert [(e.name, e.provider, e.model, e.fallbacks) for e in entries] == [
        ("smart", "anthropic", "claude-sonnet-4-5", []),
        ("fast", "openai", "gpt-4o-mini", ["demo"]),
    ]


def test_a_json_file_may_wrap_its_entries_in_a_models_key(tmp_path: Path) -> None:
    path = tmp_path / "models.json"
    path.write_text(json.dumps({"models": [{"name": "m", "provider": "gemini", "model": "gemini-2.5-flash"}]}))
    assert [e.name for e in load_catalog(None, path)] == ["m"]


def test_an_entry_may_carry_its_prices_per_million_tokens(tmp_path: Path) -> None:
    toml = tmp_path / "models.toml"
    toml.write_text(
        '[[models]]\nname = "smart"\nprovider = "openai"\nmodel = "gpt-4o"\n'
        "prices = { inputPerMillionUsd = 2.5, outputPerMillionUsd = 10 }\n"
    )
    inline = json.dumps([{"name": "free", "provider": "openai", "model": "llama3.1"}])
    free, smart = load_catalog(inline, toml)
    assert free.prices is None
    assert smart.prices is not None
    assert (smart.prices.input_per_million_usd, smart.prices.output_per_million_usd) == (2.5, 10.0)


def _priced(prices: object) -> str:
    return json.dumps([{"name": "x", "provider": "openai", "model": "a", "prices": prices}])


@pytest.mark.parametrize(
    ("inline", "message"),
    [
        (_priced({"inputPerMillionUsd": 1}), "COMPLETION_MODELS: 0.prices.outputPerMillionUsd: Field required"),
        (_priced({"outputPerMillionUsd": 1}), "COMPLETION_MODELS: 0.prices.inputPerMillionUsd: Field required"),
        (
            _priced({"inputPerMillionUsd": -0.5, "outputPerMillionUsd": 1}),
            "0.prices.inputPerMillionUsd: Input should be greater than or equal to 0",
        ),
        (_priced({"inputPerMillionUsd": 1, "outputPerMillionUsd": "lots"}), "0.prices.outputPerMillionUsd"),
        (_priced(3), "0.prices: Input should be a valid dictionary or instance of ModelPrices"),
    ],
)
def test_prices_that_cannot_be_used_are_refused_with_the_reason(inline: str, message: str) -> None:
    with pytest.raises(CatalogError) as caught:
        load_catalog(inline, None)
    assert message in str(caught.value)


def test_an_infinite_price_in_a_toml_file_is_refused(tmp_path: Path) -> None:
    toml = tmp_path / "models.toml"
    toml.write_text(
        '[[models]]\nname = "x"\nprovider = "openai"\nmodel = "a"\n'
        "prices = { inputPerMillionUsd = inf, outputPerMillionUsd = 1 }\n"
    )
    with pytest.raises(CatalogError) as caught:
        load_catalog(None, toml)
    assert "0.prices.inputPerMillionUsd: Input should be a finite number" in str(caught.value)


@pytest.mark.parametrize(
    ("inline", "message"),
    [
        ("[{", "COMPLETION_MODELS is not valid JSON"),
        ('[{"name": "x", "provider": "cohere", "model": "m"}]', "0.provider"),
        ('[{"name": "x", "provider": "openai"}]', "0.model"),
        (
            '[{"name": "x", "provider": "openai", "model": "a"}, {"name": "x", "provider": "openai", "model": "b"}]',
            "twice",
        ),
        ('[{"name": "x", "provider": "openai", "model": "a", "fallbacks": ["nowhere"]}]', "'nowhere'"),
        ('[{"name": "x", "provider": "openai", "model": "a", "fallbacks": ["x"]}]', "itself"),
        ('[{"name": "anthropic/x", "provider": "openai", "model": "a"}]', "would hide"),
    ],
)
def test_a_catalog_that_cannot_work_is_refused_with_the_reason(inline: str, message: str) -> None:
    with pytest.raises(CatalogError) as caught:
        load_catalog(inline, None)
    assert message in str(caught.value)


def test_credentials_are_references_to_the_environment_or_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEAM_KEY", "sk-from-env")
    secret = tmp_path / "key"
    secret.write_text("sk-from-file\n")
    assert resolve_secret("${env:TEAM_KEY}", what="m") == "sk-from-env"
    assert resolve_secret(f"${{file:{secret}}}", what="m") == "sk-from-file"
    assert resolve_secret("sk-literal", what="m") == "sk-literal"


def test_a_missing_credential_names_the_variable_and_never_a_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ABSENT_KEY", raising=False)
    with pytest.raises(CatalogError) as caught:
        resolve_secret("${env:ABSENT_KEY}", what="catalog model 'smart'")
    assert str(caught.value) == "catalog model 'smart': the environment variable ABSENT_KEY is not set"


@pytest.mark.anyio
async def test_an_entry_with_its_own_key_gets_its_own_adapter_and_a_provider_without_settings_is_refused() -> None:
    entries = [
        {"name": "local", "provider": "openai", "model": "llama3.1", "baseUrl": "http://127.0.0.1:11434/v1"},
        {"name": "cloud", "provider": "openai", "model": "gpt-4o", "apiKey": "sk-x", "fallbacks": ["local"]},
    ]
    async with httpx.AsyncClient() as http:
        router = build_router(CompletionSettings(models=json.dumps(entries)), http)
        local, cloud = router.route("local"), router.route("cloud")
        assert local.provider is not cloud.provider
        assert [r.name for r in cloud.chain()] == ["cloud", "local"]
        # No OpenAI settings: only the catalog names route, not bare ones.
        assert router.find("gpt-4o") is None
        unconfigured = json.dumps([{"name": "x", "provider": "openai", "model": "gpt-4o"}])
        with pytest.raises(CatalogError) as caught:
            build_router(CompletionSettings(models=unconfigured), http)
        assert "'openai', which is not configured" in str(caught.value)


@pytest.mark.anyio
async def test_a_key_file_setting_configures_the_provider(tmp_path: Path) -> None:
    key = tmp_path / "openai-key"
    key.write_text("sk-in-a-file\n")
    async with httpx.AsyncClient() as http:
        router = build_router(CompletionSettings(openai_api_key_file=key), http)
    assert router.route("gpt-4o").provider.name == "openai"


def _recording_client(seen: list[httpx.Request]) -> httpx.AsyncClient:
    answer = {
        "id": "c",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
    }

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=answer)

    return httpx.AsyncClient(transport=httpx.MockTransport(handle))


@pytest.mark.anyio
async def test_azure_settings_send_the_key_bare_in_api_key_and_max_completion_tokens() -> None:
    seen: list[httpx.Request] = []
    settings = CompletionSettings(
        openai_api_key=SecretStr("azure-key"),
        openai_base_url="https://res.openai.azure.com/openai/v1",
        openai_auth_header="api-key",
    )
    async with _recording_client(seen) as http:
        route = build_router(settings, http).route("gpt-5")
        request = CompletionRequest(model="gpt-5", messages=[Message(role="user", content="hi")], max_tokens=50)
        await route.provider.complete(request, route.upstream_model, 5)
    [sent] = seen
    assert sent.headers["api-key"] == "azure-key"
    assert "authorization" not in sent.headers
    body = json.loads(sent.content)
    assert (body.get("max_completion_tokens"), "max_tokens" in body) == (50, False)


@pytest.mark.anyio
async def test_a_compatible_server_gets_max_tokens_and_a_bearer_key() -> None:
    seen: list[httpx.Request] = []
    settings = CompletionSettings(openai_api_key=SecretStr("k"), openai_base_url="http://127.0.0.1:8000/v1")
    async with _recording_client(seen) as http:
        route = build_router(settings, http).route("llama3.1")
        request = CompletionRequest(model="llama3.1", messages=[Message(role="user", content="hi")], max_tokens=50)
        await route.provider.complete(request, route.upstream_model, 5)
    [sent] = seen
    assert sent.headers["authorization"] == "Bearer k"
    assert json.loads(sent.content)["max_tokens"] == 50


def test_a_catalog_base_url_that_is_not_http_is_refused_at_start() -> None:
    with pytest.raises(CatalogError) as caught:
        load_catalog('[{"name": "x", "provider": "openai", "model": "m", "baseUrl": "vllm:8000/v1"}]', None)
    assert "0.baseUrl" in str(caught.value)
