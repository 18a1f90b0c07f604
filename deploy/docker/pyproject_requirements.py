"""Print the third-party requirements of pyproject.toml files, one per line, for ``pip install -r``.

The images install their dependencies before any source is copied, so that a code change reuses the
cached dependency layer; at that step only the pyproject files are in the image. The suite's own
packages (``loopsuite-*``) are left out: they are installed from source afterwards with ``--no-deps``.

    python deploy/docker/pyproject_requirements.py libs/suite_common/pyproject.toml \
        services/agent_service/pyproject.toml > requirements.txt
"""

from __future__ import annotations

import re
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path

__all__ = ["LOCAL_PREFIX", "main", "project_name", "requirements"]

LOCAL_PREFIX = "loopsuite-"
"""Distributions built from this repository; never fetched from an index."""

_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def project_name(requirement: str) -> str:
    """The normalized distribution name of a PEP 508 requirement (``Foo_Bar>=1; ...`` -> ``foo-bar``)."""
    match = _NAME.match(requirement)
    if match is None:
        raise ValueError(f"not a requirement: {requirement!r}")
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


def requirements(pyprojects: Sequence[Path]) -> list[str]:
    """The ``[project] dependencies`` of every file, in order, without duplicates or local packages."""
    found: list[str] = []
    for path in pyprojects:
        project = tomllib.loads(path.read_text(encoding="utf-8")).get("project", {})
        for requirement in project.get("dependencies", []):
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
