"""mcp-client-service against the official MCP conformance suite (``@modelcontextprotocol/conformance``, pinned in
tests/support/node_servers), client scenarios: the suite runs each scenario's server and judges what the gateway,
driven by ``support/conformance/client_under_test.py``, sent it.

Each scenario is one test; it passes when every check of the scenario does (a ``WARNING`` is allowed, as the suite
itself allows it). A scenario the gateway does not pass yet is listed in ``EXPECTED_FAILURES`` with the reason, and
turns into a failure the day it passes (strict), so the list cannot go stale.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from support.everything_server import installed_node_program

TESTS = Path(__file__).resolve().parents[1]
SUPPORT = TESTS / "support" / "conformance"
NODE_MODULES = TESTS / "support" / "node_servers" / "node_modules"
SUITE = NODE_MODULES / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
REPOSITORY = TESTS.parent

SCENARIOS = [
    "initialize",
    "tools_call",
    "sse-retry",
    "elicitation-sep1034-client-defaults",
    "auth/client-credentials-basic",
]
"""Run one at a time: ``sse-retry`` measures the reconnection's timing, which a loaded machine would blur.
``auth/client-credentials-basic`` (an extension scenario, outside the auth suite): machine to machine, no person."""

SUITES = {
    "auth": [
        "auth/metadata-default",
        "auth/metadata-var1",
        "auth/metadata-var2",
        "auth/metadata-var3",
        "auth/basic-cimd",
        "auth/scope-from-www-authenticate",
        "auth/scope-from-scopes-supported",
        "auth/scope-omitted-when-undefined",
        "auth/scope-step-up",
        "auth/scope-retry-limit",
        "auth/token-endpoint-auth-basic",
        "auth/token-endpoint-auth-post",
        "auth/token-endpoint-auth-none",
        "auth/pre-registration",
    ],
    "backcompat": ["auth/2025-03-26-oauth-metadata-backcompat", "auth/2025-03-26-oauth-endpoint-fallback"],
}
"""Each suite runs once per module (its scenarios in parallel, each with a gateway of its own); each scenario is then
a test of its own, reading that run's results."""

EXPECTED_FAILURES: dict[str, str] = {
    "auth/2025-03-26-oauth-metadata-backcompat": (
        "the scenario serves authorization-server metadata at the root well-known URL naming the issuer "
        "<origin>/oauth; RFC 8414 3.3 (and the MCP SDK 2.3.0's SEP-2468 check, which the gateway keeps) refuses "
        "metadata whose issuer is not the one its URL was built from, so the gateway stops there (no mix-up)"
    ),
}


def _environment() -> dict[str, str]:
    paths = [str(TESTS), *(str(path) for path in (REPOSITORY / "services").glob("*/src"))]
    paths += [str(REPOSITORY / "libs" / "suite_common" / "src")]
    inherited = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([*paths, *([inherited] if inherited else [])])}


def run_conformance(where: Path, *selection: str, timeout_ms: int = 60_000) -> subprocess.CompletedProcess[str]:
    """The suite's ``client`` command over the gateway for ``selection`` (``--scenario X`` or ``--suite Y``)."""
    command = f"{sys.executable} {SUPPORT / 'client_under_test.py'}"
    return subprocess.run(
        [
            "node",
            "--import",
            str(SUPPORT / "node20_globsync.mjs"),
            str(installed_node_program(SUITE)),  # skipped without node and npm; installed if missing
            "client",
            "--command",
            command,
            *selection,
            "--timeout",
            str(timeout_ms),
            "-o",
            str(where),
        ],
        capture_output=True,
        text=True,
        env=_environment(),
        timeout=timeout_ms / 1000 * 3,
        check=False,
    )


def scenario_checks(where: Path, scenario: str) -> list[dict[str, Any]]:
    """The checks the suite recorded for ``scenario`` (its results folder is ``<scenario>-<timestamp>``)."""
    folders = sorted(where.glob(f"{scenario}-*"))
    assert folders, f"no results for {scenario} in {where}"
    checks: list[dict[str, Any]] = json.loads((folders[-1] / "checks.json").read_text())
    return checks


def failures(checks: list[dict[str, Any]]) -> list[str]:
    return [
        f"{check['id']}: {check.get('errorMessage') or check.get('details')}"
        for check in checks
        if check["status"] not in ("SUCCESS", "INFO", "WARNING")
    ]


_IN_SUITES = {scenario for scenarios in SUITES.values() for scenario in scenarios}


def _expectation(scenario: str) -> Any:
    reason = EXPECTED_FAILURES.get(scenario)
    return pytest.param(scenario, marks=pytest.mark.xfail(reason=reason, strict=True)) if reason else scenario


@pytest.mark.parametrize(
    "scenario", [_expectation(name) for name in [*SCENARIOS, *EXPECTED_FAILURES] if name not in _IN_SUITES]
)
def test_the_gateway_passes_the_conformance_scenario(scenario: str, tmp_path: Path) -> None:
    run = run_conformance(tmp_path, "--scenario", scenario)
    checks = scenario_checks(tmp_path, scenario)
    assert checks, run.stdout + run.stderr
    assert failures(checks) == [], run.stdout[-4000:]


@pytest.fixture(scope="module")
def suite_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, str]]:
    """Each suite run once (lazily, on its first scenario's test): its results folder and the suite's output."""
    return {}


def _suite_of(scenario: str) -> str:
    return next(suite for suite, scenarios in SUITES.items() if scenario in scenarios)


@pytest.mark.parametrize("scenario", [_expectation(name) for scenarios in SUITES.values() for name in scenarios])
def test_the_gateway_passes_the_suites_scenario(
    scenario: str, suite_runs: dict[str, tuple[Path, str]], tmp_path_factory: pytest.TempPathFactory
) -> None:
    suite = _suite_of(scenario)
    if suite not in suite_runs:
        where = tmp_path_factory.mktemp(f"conformance-{suite}")
        run = run_conformance(where, "--suite", suite, timeout_ms=90_000)
        suite_runs[suite] = (where, run.stdout + run.stderr)
    where, output = suite_runs[suite]
    checks = scenario_checks(where, scenario)
    assert checks, output[-4000:]
    assert failures(checks) == [], output[-4000:]
