"""The documentation: every setting on docs/configuration.md, that page as its generator writes it, no dead link."""

from __future__ import annotations

import re
import typing
from pathlib import Path

import pytest
from generate_configuration import COMPONENTS, OUTPUT, render, settings_table
from pydantic import Field
from pydantic_settings import SettingsConfigDict

from suite_common.settings import ServiceSettings
from suite_common.wire import RunEvent

ROOT = Path(__file__).resolve().parents[2]
CONFIGURATION = OUTPUT.read_text(encoding="utf-8")
COMMON = set(ServiceSettings.model_fields)


@pytest.mark.parametrize("settings", [settings for _, _, settings in COMPONENTS], ids=lambda cls: cls.__name__)
def test_every_setting_is_on_the_configuration_page(settings: type[ServiceSettings]) -> None:
    prefix = settings.model_config.get("env_prefix", "")
    missing = [
        f"{prefix}{name.upper()}"
        for name in settings.model_fields
        if name not in COMMON and f"`{prefix}{name.upper()}`" not in CONFIGURATION
    ]
    assert missing == [], f"run `make docs`: docs/configuration.md lacks {missing}"


def test_the_settings_every_service_shares_are_on_the_configuration_page() -> None:
    for name in COMMON:
        assert f"`<PREFIX>{name.upper()}`" in CONFIGURATION


def test_the_configuration_page_is_what_the_settings_classes_say() -> None:
    assert render() == CONFIGURATION, "docs/configuration.md is stale: run `make docs`"


def test_a_row_gives_the_variable_its_type_its_default_and_the_fields_docstring() -> None:
    class Example(ServiceSettings):
        model_config = SettingsConfigDict(env_prefix="EXAMPLE_")

        mode: str = "a|b"
        """Which ``mode``:
        either one."""
        timeout_seconds: float | None = Field(default=None, gt=0, description="Unset: no limit.")
        names: list[str] = Field(default_factory=lambda: ["x", "y"], description="Names, within timeout_seconds.")

    table = settings_table(Example, prefix="EXAMPLE_", names=["mode", "timeout_seconds", "names"])

    assert table.splitlines()[2:] == [
        "| `EXAMPLE_MODE` | text | `a\\|b` | Which `mode`: either one. |",
        "| `EXAMPLE_TIMEOUT_SECONDS` | number | unset | Unset: no limit. |",
        "| `EXAMPLE_NAMES` | list of text | `x,y` | Names, within `EXAMPLE_TIMEOUT_SECONDS`. |",
    ]


def test_a_setting_without_a_description_stops_the_generator() -> None:
    class Undocumented(ServiceSettings):
        mystery: int = 3

    with pytest.raises(ValueError, match=r"Undocumented.mystery has no description"):
        settings_table(Undocumented, prefix="", names=["mystery"])


_LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")


def _relative_links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.DOTALL)
    targets = [match["target"] for match in _LINK.finditer(text)]
    return [target for target in targets if not re.match(r"[a-z][a-z0-9+.-]*:|#", target)]


@pytest.mark.parametrize("page", [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))], ids=lambda p: p.name)
def test_every_relative_link_points_at_a_file_that_exists(page: Path) -> None:
    dead = [target for target in _relative_links(page) if not (page.parent / target.split("#")[0]).exists()]
    assert dead == [], f"{page.name} links to files that do not exist: {dead}"


def _run_event_types() -> list[str]:
    union = typing.get_args(typing.get_args(RunEvent)[0])
    return [typing.get_args(event.model_fields["type"].annotation)[0] for event in union]


def test_every_event_of_a_run_is_in_the_agent_api_reference_and_the_readme() -> None:
    reference = (ROOT / "docs" / "agent-api.md").read_text(encoding="utf-8")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    types = _run_event_types()
    assert "reasoning" in types
    assert [name for name in types if f"| `{name}` |" not in reference] == []
    events = readme[readme.index("\nEvents: ") :].split("\n\n")[0]  # the README's list of them
    assert [name for name in types if f"`{name}`" not in events] == []


_OUTSIDE = re.compile("|".join([r"DESIGN" + r"\.md", r"/work" + r"/", r"\bshared" + r"/"]))
"""What points outside the repository: the design page and the folders it was written in (a clone has neither)."""
_SKIPPED_FOLDERS = {
    ".git",
    ".venv",
    ".data",
    "node_modules",
    "__pycache__",
    ".ruff_cache",
    ".mypy_cache",
    ".pytest_cache",
    ".import_linter_cache",
    ".grimp_cache",
}
_TEXT_SUFFIXES = {
    ".py",
    ".md",
    ".toml",
    ".txt",
    ".yml",
    ".yaml",
    ".json",
    ".js",
    ".css",
    ".html",
    ".cfg",
    ".ini",
    ".sh",
    ".env",
    ".example",
}


def _project_files() -> list[Path]:
    found = []
    for path in ROOT.rglob("*"):
        parts = set(path.relative_to(ROOT).parts)
        if parts & _SKIPPED_FOLDERS or not path.is_file():
            continue
        if path.suffix in _TEXT_SUFFIXES or path.name in {"Makefile", "Dockerfile", "run"}:
            found.append(path)
    return found


def test_no_file_of_the_project_refers_to_anything_outside_the_repository() -> None:
    files = _project_files()
    assert any(path.match("suite_common/wire/__init__.py") for path in files)
    outside = [
        f"{path.relative_to(ROOT)}: {match[0]!r}"
        for path in files
        for match in [_OUTSIDE.search(path.read_text(encoding="utf-8", errors="replace"))]
        if match
    ]
    assert outside == []
