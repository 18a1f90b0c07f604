"""Print the third-party requirements of pyproject.toml files, one per line, for ``pip install -r``.

The images install their dependencies before any source is copied, so that a code change reuses the
cached dependency layer; at that step only the pyproject files are in the image. The suite's own
packages (``loopsuite-*``) are left out: they are installed from source afterwards with ``--no-deps``; the
extras a file asks of one of them (``loopsuite-common[sql]``) are listed in its place, from that package's own
``[project.optional-dependencies]`` (its pyproject is among the files).

    python deploy/docker/pyproject_requirements.py libs/suite_common/pyproject.toml \
        services/agent_service/pyproject.toml > requirements.txt
"""

from __future__ import annotations

import re
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path

__all__ = ["LOCAL_PREFIX", "extras", "main", "project_name", "requirements"]

LOCAL_PREFIX = "loopsuite-"
"""Distributions built from this repository; never fetched from an index."""

_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_EXTRAS = re.compile(r"^\s*[A-Za-z0-9][A-Za-z0-9._-]*\s*\[([^\]]*)\]")


def project_name(requirement: str) -> str:
    """The normalized distribution name of a PEP 508 requirement (``Foo_Bar>=1; ...`` -> ``foo-bar``)."""
    match = _NAME.match(requirement)
    if match is None:
        raise ValueError(f"not a requirement: {requirement!r}")
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


def extras(requirement: str) -> list[str]:
    """The extras a PEP 508 requirement asks for (``foo[a, b]>=1`` -> ``["a", "b"]``)."""
    match = _EXTRAS.match(requirement)
    return [] if match is None else [extra.strip() for extra in match.group(1).split(",") if extra.strip()]


def requirements(pyprojects: Sequence[Path]) -> list[str]:
    """The ``[project] dependencies`` of every file, in order, without duplicates or local packages; after each
    file's own, those of its extras that another file asks for."""
    projects = [tomllib.loads(path.read_text(encoding="utf-8")).get("project", {}) for path in pyprojects]
    wanted: dict[str, set[str]] = {}
    for project in projects:
        for requirement in project.get("dependencies", []):
            if project_name(requirement).startswith(LOCAL_PREFIX):
                wanted.setdefault(project_name(requirement), set()).update(extras(requirement))
    found: list[str] = []
    for project in projects:
        optional = project.get("optional-dependencies", {})
        own = list(project.get("dependencies", []))
        name = project_name(project["name"]) if "name" in project else None
        for extra in sorted(wanted.get(name, set()) if name else ()):
            own += optional.get(extra, [])
        for requirement in own:
            if project_name(requirement).startswith(LOCAL_PREFIX) or requirement in found:
                continue
            found.append(requirement)
    return found


def main(argv: Sequence[str] | None = None) -> int:
    paths = [Path(arg) for arg in (sys.argv[1:] if argv is None else argv)]
    if not paths:
        print("usage: pyproject_requirements.py PYPROJECT.toml...", file=sys.stderr)
        return 2
    sys.stdout.write("".join(f"{line}\n" for line in requirements(paths)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
