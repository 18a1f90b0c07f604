"""The callers file (AGENT_CALLERS_FILE): its keys, tenants and trust, and every way it can be wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_service.access.callers_file import CallersFileError, load_callers, parse_callers
from agent_service.core.tenancy import TenantRules
from support.caller_keys import key_sha256

_GOOD = f"""
[tenants.acme]
[tenants.globex]

[[keys]]
name = "acme-platform"
tenant = "acme"
sha256 = "{key_sha256("acme-secret")}"
trusted = true

[[keys]]
name = "globex-app"
tenant = "globex"
key_env = "GLOBEX_KEY"
"""


def test_keys_are_identified_by_their_hash_or_their_environment_variable() -> None:
    callers = parse_callers(_GOOD, environ={"GLOBEX_KEY": "globex-secret"})
    assert callers.tenants == {"acme", "globex"}
    acme = callers.identify("acme-secret")
    globex = callers.identify("globex-secret")
    assert acme is not None
    assert (acme.name, acme.tenant, acme.trusted) == ("acme-platform", "acme", True)
    assert globex is not None
    assert (globex.name, globex.tenant, globex.trusted) == ("globex-app", "globex", False)
    assert callers.identify("acme-secret ") is None
    assert callers.identify("") is None


def test_a_key_never_appears_in_its_representation() -> None:
    callers = parse_callers(_GOOD, environ={"GLOBEX_KEY": "globex-secret"})
    assert "globex-secret" not in repr(callers)
    assert key_sha256("acme-secret") not in repr(callers)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[tenants.acme\n", "not valid TOML"),
        ("[tenants.acme]\n", "no [[keys]]"),
        (
            f'[tenants.a]\n[[keys]]\nname = "k"\ntenant = "b"\nsha256 = "{key_sha256("x")}"\n',
            "tenant 'b' is not one of",
        ),
        ('[tenants.a]\n[[keys]]\nname = "k"\ntenant = "a"\n', "give either sha256 or key_env"),
        (
            f'[tenants.a]\n[[keys]]\nname = "k"\ntenant = "a"\nsha256 = "{key_sha256("x")}"\nkey_env = "X"\n',
            "give either sha256 or key_env",
        ),
        ('[tenants.a]\n[[keys]]\nname = "k"\ntenant = "a"\nsha256 = "abc"\n', "sha256 must be 64 hex digits"),
        (
            '[tenants.a]\n[[keys]]\nname = "k"\ntenant = "a"\nkey_env = "NOT_SET_ANYWHERE"\n',
            "NOT_SET_ANYWHERE is not set",
        ),
        (
            f'[tenants.a]\n[[keys]]\nname = "k"\ntenant = "a"\nsha256 = "{key_sha256("x")}"\n'
            f'[[keys]]\nname = "k"\ntenant = "a"\nsha256 = "{key_sha256("y")}"\n',
            "two keys are named 'k'",
        ),
        (
            f'[tenants.a]\n[[keys]]\nname = "k"\ntenant = "a"\nsha256 = "{key_sha256("x")}"\n'
            f'[[keys]]\nname = "j"\ntenant = "a"\nsha256 = "{key_sha256("x")}"\n',
            "two keys are the same key",
        ),
        (
            f'[tenants.a]\n[[keys]]\nname = "k"\ntenant = "a"\nsha256 = "{key_sha256("x")}"\ntrusted = "yes"\n',
            "trusted must",
        ),
        (
            f'[tenants.a]\n[[keys]]\nname = "k"\ntenant = "a"\nsha256 = "{key_sha256("x")}"\nkey = "x"\n',
            "unknown field 'key'",
        ),
        ("[tenant.a]\n", "unknown table 'tenant'"),
        (f'[tenants.a]\n[[keys]]\nname = "a key"\ntenant = "a"\nsha256 = "{key_sha256("x")}"\n', "name must be"),
    ],
)
def test_a_file_that_cannot_be_used_is_refused_in_one_line_naming_the_setting(text: str, problem: str) -> None:
    with pytest.raises(CallersFileError) as refused:
        parse_callers(text, source="callers.toml", environ={})
    message = str(refused.value)
    assert message.startswith("AGENT_CALLERS_FILE: callers.toml: ")
    assert problem in message
    assert "\n" not in message


def test_a_missing_file_is_refused_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.toml"
    with pytest.raises(CallersFileError, match=f"AGENT_CALLERS_FILE: {missing}: cannot read it"):
        load_callers(missing)


def _with_tenant_fields(fields: str) -> str:
    return f'[tenants.acme]\n{fields}\n[[keys]]\nname = "k"\ntenant = "acme"\nsha256 = "{key_sha256("x")}"\n'


def test_a_tenant_without_fields_has_no_rules() -> None:
    rules = parse_callers(_with_tenant_fields("")).rules["acme"]
    assert rules == TenantRules()
    assert rules.allows_model("anything")
    assert rules.allows_tool("rag", "add_documents")


def test_a_tenants_rules_allow_models_by_glob_and_tools_by_name_or_server_then_deny() -> None:
    fields = (
        "max_concurrent_runs = 4\n"
        'models = ["gpt-4o*", "demo"]\n'
        'tools = ["search_documents", "web:*", "rag:add_documents"]\n'
        'deny_tools = ["rag:add_documents", "web:fetch"]\n'
    )
    callers = parse_callers(_with_tenant_fields(fields))
    rules = callers.rules["acme"]
    assert rules.max_concurrent_runs == 4
    assert callers.any_run_cap()
    assert [rules.allows_model(model) for model in ("gpt-4o", "gpt-4o-mini", "demo", "demo-2", "gpt-4")] == [
        True,
        True,
        True,
        False,
        False,
    ]
    assert rules.allows_tool("rag", "search_documents")  # a bare name: whichever server has it
    assert rules.allows_tool("web", "search")  # the whole server
    assert not rules.allows_tool("web", "fetch")  # denied after the allow list
    assert not rules.allows_tool("rag", "add_documents")
    assert not rules.allows_tool("rag", "list_documents")  # not allowed at all


def test_a_rule_matches_a_renamed_tool_by_its_listed_name_or_its_servers_own_name() -> None:
    # Under MCP_CLIENT_TOOL_NAME_COLLISION=prefix echo-b's whoami is listed as echo-b__whoami; a toolPrefix "c_"
    # lists echo-c's pid as c_pid. A rule holds whichever name it uses.
    fields = 'deny_tools = ["whoami", "echo-b:pid", "echo-c:c_echo"]\n'
    rules = parse_callers(_with_tenant_fields(fields)).rules["acme"]
    assert not rules.allows_tool("echo-b", "echo-b__whoami", "whoami")
    assert not rules.allows_tool("echo-c", "c_whoami", "whoami")
    assert not rules.allows_tool("echo-b", "echo-b__pid", "pid")
    assert not rules.allows_tool("echo-c", "c_echo", "echo")  # by its listed name
    assert rules.allows_tool("echo-a", "pid")  # another server's pid
    assert rules.allows_tool("echo-c", "c_pid", "pid")
    assert rules.allows_tool("echo-b", "echo-b__echo", "echo")
    allowed = parse_callers(_with_tenant_fields('tools = ["echo-b:echo", "c_pid"]\n')).rules["acme"]
    assert allowed.allows_tool("echo-b", "echo-b__echo", "echo")
    assert allowed.allows_tool("echo-c", "c_pid", "pid")
    assert not allowed.allows_tool("echo-b", "echo-b__pid", "pid")


def test_the_servers_a_tenants_rules_name() -> None:
    fields = 'tools = ["search_documents", "web:*"]\ndeny_tools = ["rag:add_documents", "fetch"]\n'
    assert parse_callers(_with_tenant_fields(fields)).rules["acme"].servers_named() == {"web", "rag"}
    assert TenantRules().servers_named() == set()


def test_model_globs_are_kept_and_without_a_cap_no_slots_are_needed() -> None:
    callers = parse_callers(_with_tenant_fields('models = ["demo"]'))
    assert callers.rules["acme"].models == ("demo",)
    assert not parse_callers(_with_tenant_fields("")).any_run_cap()


def test_a_tenants_run_caps_and_monthly_budgets_are_read_amounts_as_floats() -> None:
    fields = (
        "max_iterations = 8\nmax_run_seconds = 60\nmax_run_tokens = 50000\nmax_run_cost_usd = 0.5\n"
        "monthly_tokens = 5000000\nmonthly_cost_usd = 200\nuser_monthly_tokens = 20000\nuser_monthly_cost_usd = 1.25\n"
    )
    rules = parse_callers(_with_tenant_fields(fields)).rules["acme"]
    assert (rules.max_iterations, rules.max_run_seconds, rules.max_run_tokens, rules.max_run_cost_usd) == (
        8,
        60.0,
        50000,
        0.5,
    )
    assert (rules.monthly_tokens, rules.monthly_cost_usd) == (5_000_000, 200.0)
    assert (rules.user_monthly_tokens, rules.user_monthly_cost_usd) == (20_000, 1.25)
    assert isinstance(rules.max_run_seconds, float)
    assert rules.has_monthly_budget
    assert not parse_callers(_with_tenant_fields("max_run_tokens = 10")).rules["acme"].has_monthly_budget


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ("budget = 3", "tenant 'acme': unknown field 'budget'"),
        ("max_iterations = 0", "max_iterations must be a whole number, 1 or more"),
        ("max_iterations = 2.5", "max_iterations must be a whole number, 1 or more"),
        ("max_run_tokens = true", "max_run_tokens must be a whole number, 1 or more"),
        ('monthly_tokens = "1000"', "monthly_tokens must be a whole number, 1 or more"),
        ("user_monthly_tokens = -5", "user_monthly_tokens must be a whole number, 1 or more"),
        ("max_run_seconds = 0", "max_run_seconds must be a number above 0"),
        ("max_run_cost_usd = -0.1", "max_run_cost_usd must be a number above 0"),
        ("monthly_cost_usd = inf", "monthly_cost_usd must be a number above 0"),
        ("user_monthly_cost_usd = nan", "user_monthly_cost_usd must be a number above 0"),
        ('user_monthly_cost_usd = "5"', "user_monthly_cost_usd must be a number above 0"),
        ('max_concurrent_runs = "4"', "max_concurrent_runs must be a whole number"),
        ("max_concurrent_runs = -1", "max_concurrent_runs must be a whole number"),
        ("max_concurrent_runs = true", "max_concurrent_runs must be a whole number"),
        ('models = "demo"', "models must be a list of non-empty strings"),
        ("models = [1]", "models must be a list of non-empty strings"),
        ('tools = [""]', "tools must be a list of non-empty strings"),
        ('tools = ["a:b:c"]', "tools: 'a:b:c' is not a tool name"),
        ('deny_tools = ["web:"]', "deny_tools: 'web:' is not a tool name"),
        ('tool_roles = ["rag:*"]', "tool_roles must be a table"),
        ('tool_roles = {"rag:*" = "root"}', "tool_roles: 'rag:*' = 'root' is not a role (guest, user, admin, owner)"),
        ('tool_roles = {"a:b:c" = "admin"}', "tool_roles: 'a:b:c' is not a tool name"),
        ("role_monthly_tokens = 5000", "role_monthly_tokens must be a table of roles"),
        ("role_monthly_tokens = {guests = 5000}", "role_monthly_tokens: 'guests' is not a role"),
        ("role_monthly_tokens = {guest = 0}", "role_monthly_tokens.guest must be a whole number, 1 or more"),
        ("role_monthly_tokens = {guest = 2.5}", "role_monthly_tokens.guest must be a whole number, 1 or more"),
        ("role_monthly_cost_usd = {owner = -1}", "role_monthly_cost_usd.owner must be a number above 0"),
        ('role_monthly_cost_usd = {user = "1"}', "role_monthly_cost_usd.user must be a number above 0"),
        ("max_mcp_servers = -1", "max_mcp_servers must be a whole number, 0 or more"),
        ("max_mcp_servers = true", "max_mcp_servers must be a whole number, 0 or more"),
        ("approval_timeout_seconds = inf", "approval_timeout_seconds must be a number above 0 and at most 2592000"),
        ("approval_timeout_seconds = nan", "approval_timeout_seconds must be a number above 0 and at most 2592000"),
        # Past what a date can hold: the run would fail when it parks (OverflowError), not the file when loaded.
        ("approval_timeout_seconds = 1e300", "approval_timeout_seconds must be a number above 0 and at most 2592000"),
        ("approval_timeout_seconds = 2592001", "approval_timeout_seconds must be a number above 0 and at most"),
        ("input_timeout_seconds = 0", "input_timeout_seconds must be a number above 0 and at most 2592000"),
        ('input_timeout_seconds = "600"', "input_timeout_seconds must be a number above 0 and at most 2592000"),
        ("input_timeout_seconds = 2592001", "input_timeout_seconds must be a number above 0 and at most 2592000"),
    ],
)
def test_a_wrong_tenant_field_is_one_line_naming_it(fields: str, problem: str) -> None:
    with pytest.raises(CallersFileError) as refused:
        parse_callers(_with_tenant_fields(fields), source="callers.toml")
    message = str(refused.value)
    assert problem in message
    assert "\n" not in message


def test_the_complete_example_of_docs_callers_md_is_a_callers_file_the_service_takes() -> None:
    docs = (Path(__file__).resolve().parents[3] / "docs" / "callers.md").read_text()
    example = docs.split("```toml\n# Every tenant", 1)[1].split("```", 1)[0]
    callers = parse_callers("# Every tenant" + example, environ={"GLOBEX_APP_KEY": "a-key"})
    acme = callers.rules["acme"]
    assert (acme.max_concurrent_runs, acme.monthly_tokens, acme.max_run_cost_usd) == (4, 5000000, 0.5)
    assert acme.system_prompt is not None
    assert sorted(acme.personas) == ["concise", "support"]
    assert sorted(callers.rules["globex"].personas) == ["concise"]
    assert [(key.name, key.role) for key in callers.keys] == [
        ("acme-platform", None),
        ("acme-admin", "admin"),
        ("globex-app", None),
    ]
    assert (acme.role_monthly_tokens, acme.max_mcp_servers) == ({"guest": 5000}, 5)
    assert acme.lowest_role("rag", "add_documents") == "admin"


def test_the_roles_example_of_docs_callers_md_is_a_callers_file_the_service_takes() -> None:
    docs = (Path(__file__).resolve().parents[3] / "docs" / "callers.md").read_text()
    example = docs.split("### A complete example\n\n```toml\n", 1)[1].split("```", 1)[0]
    callers = parse_callers(example, environ={"ACME_PLATFORM_KEY": "p", "ACME_ADMIN_KEY": "a"})
    acme = callers.rules["acme"]
    assert acme.user_monthly_tokens_of("guest") == (5000, "role_monthly_tokens.guest")
    assert acme.user_monthly_tokens_of("owner") == (None, "role_monthly_tokens.owner")
    assert acme.lowest_role("crm", "lookup") == "owner"
    assert [(key.name, key.trusted, key.role) for key in callers.keys] == [
        ("acme-platform", True, None),
        ("acme-admin", False, "admin"),
    ]
