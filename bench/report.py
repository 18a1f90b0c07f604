"""Tables for people, and the same figures as JSON and Markdown for the README."""

from __future__ import annotations

import importlib.metadata
import os
import platform
from dataclasses import dataclass, field
from typing import Any

from bench.measure import ArmFigures, LoadFigures

__all__ = [
    "CPU_NOTE",
    "SEQUENTIAL_COLUMNS",
    "Section",
    "Table",
    "Target",
    "add_arm",
    "add_difference",
    "add_load",
    "load_table",
    "machine",
    "mb",
    "ms",
    "render_summary",
    "summary_markdown",
]

SEQUENTIAL_COLUMNS = ["", "req/round", "p50 ms", "p99 ms", "x floor", "CPU ms/req"]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


def mb(size: float) -> str:
    return f"{size / 2**20:.1f}"


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, *cells: str) -> None:
        self.rows.append(list(cells))

    def render(self) -> str:
        widths = [len(column) for column in self.columns]
        for row in self.rows:
            widths = [max(width, len(cell)) for width, cell in zip(widths, row, strict=True)]

        def line(cells: list[str]) -> str:
            first = cells[0].ljust(widths[0])
            rest = [cell.rjust(width) for cell, width in zip(cells[1:], widths[1:], strict=True)]
            return "  ".join([first, *rest]).rstrip()

        out = [self.title, line(self.columns), line(["-" * width for width in widths])]
        out += [line(row) for row in self.rows]
        out += [f"  {note}" for note in self.notes]
        return "\n".join(out)


def add_arm(table: Table, label: str, arm: ArmFigures, floor: ArmFigures, *, ttfb: bool = False) -> None:
    """A row of an interleaved arm: median of round p50s, p99 of all samples, ratio to the floor's p50."""
    p50, p99 = (arm.ttfb_p50, arm.ttfb_p99) if ttfb else (arm.p50, arm.p99)
    cpu = ms(arm.cpu_per_request) if arm.cpu and not ttfb else ""
    table.add(label, f"{arm.per_round:.0f}", ms(p50), ms(p99), f"{p50 / floor.p50:.2f}", cpu)


def add_difference(
    table: Table, label: str, through: ArmFigures, direct: ArmFigures, *, ttfb: bool = False, per: int = 1
) -> float:
    """A row of what ``through`` adds to ``direct`` (p50 and p99 differences, divided by ``per``); returns the p50."""
    if ttfb:
        p50, p99 = through.ttfb_p50 - direct.ttfb_p50, through.ttfb_p99 - direct.ttfb_p99
    else:
        p50, p99 = through.p50 - direct.p50, through.p99 - direct.p99
    cpu = ms((through.cpu_per_request - direct.cpu_per_request) / per) if through.cpu and not ttfb else ""
    table.add(label, "", ms(p50 / per), ms(p99 / per), "", cpu)
    return p50 / per


def load_table(title: str) -> Table:
    return Table(title, ["", "concurrent", "requests", "req/s", "p50 ms", "p99 ms", "CPU ms/req"])


def add_load(table: Table, label: str, load: LoadFigures) -> None:
    cpu = ms(load.cpu_per_request) if load.cpu else ""
    table.add(label, str(load.concurrency), str(load.requests), f"{load.rate:.0f}", ms(load.p50), ms(load.p99), cpu)


@dataclass(frozen=True)
class Target:
    name: str
    goal: str
    measured: str
    passed: bool

    @property
    def verdict(self) -> str:
        return "PASS" if self.passed else "MISS"


@dataclass
class Section:
    """What one benchmark prints and records."""

    name: str
    tables: list[Table] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def machine() -> dict[str, str]:
    uvloop = _version("uvloop")
    httptools = _version("httptools")
    return {
        "cpu": _cpu_model(),
        "cores": str(os.cpu_count()),
        "python": platform.python_version(),
        "uvloop": f"yes ({uvloop})" if uvloop else "no",
        "httptools": f"yes ({httptools})" if httptools else "no",
        "uvicorn": _version("uvicorn") or "?",
        "platform": platform.platform(),
    }


CPU_NOTE = (
    "CPU ms/req: CPU time per request of the processes doing the arm's work on our side, from /proc schedstat: "
    "the hello server, the service(s) under test, or this process for direct MCP SDK calls; robust to a busy "
    "machine, unlike latency"
)


def render_summary(targets: list[Target]) -> str:
    table = Table("Summary: targets (each a figure measured in this run)", ["target", "goal", "measured", ""])
    for target in targets:
        table.add(target.name, target.goal, target.measured, target.verdict)
    return table.render()


def summary_markdown(
    info: dict[str, str], pinning: str, targets: list[Target], sections: list[Section], *, heading: str
) -> str:
    lines = [
        f"# loopsuite benchmark: {heading}",
        "",
        f"Machine: {info['cpu']}, {info['cores']} cores, Python {info['python']}, uvloop {info['uvloop']}, "
        f"httptools {info['httptools']}. {pinning[0].upper()}{pinning[1:]}.",
        "",
        "| target | goal | measured | |",
        "| --- | --- | --- | --- |",
    ]
    lines += [f"| {t.name} | {t.goal} | {t.measured} | {t.verdict} |" for t in targets]
    for section in sections:
        for table in section.tables:
            lines += ["", f"**{table.title}**", "", "| " + " | ".join(table.columns) + " |"]
            lines.append("| " + " | ".join("---" for _ in table.columns) + " |")
            lines += ["| " + " | ".join(row) + " |" for row in table.rows]
            lines += [f"- {note}" for note in table.notes]
    return "\n".join(lines) + "\n"
