"""The hosts file the SSRF guard reads before DNS: its format, its reloads, and that its answers are still checked."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pytest

from suite_common.hosts_file import HostsFileResolver, parse_hosts
from suite_common.ssrf import EgressBlocked, EgressPolicy, resolve_allowed

pytestmark = pytest.mark.anyio


class _Dns:
    """The fallback resolver, counting what it was asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def __call__(self, host: str, port: int) -> Sequence[str]:
        self.asked.append(host)
        return ["93.184.215.14"]


def _rewrite(path: Path, text: str) -> None:
    """Replace the file's text and move its modification time on, as a deployment's update would."""
    before = path.stat().st_mtime_ns
    path.write_text(text, encoding="utf-8")
    os.utime(path, ns=(before + 1_000_000_000, before + 1_000_000_000))


def test_hosts_lines_map_each_name_to_its_addresses_and_skip_comments_and_bad_lines() -> None:
    text = """
    # pinned for the deployment
    10.1.0.5   rag.internal  RAG-Alias.   # two names on one line
    fd00:1::5  rag.internal
    10.1.0.5   rag.internal
    not-an-ip  broken.internal
    ::ffff:10.0.0.1 mapped.internal
    """

    assert parse_hosts(text) == {
        "rag.internal": ["10.1.0.5", "fd00:1::5"],
        "rag-alias": ["10.1.0.5"],
        "mapped.internal": ["::ffff:a00:1"],
    }


async def test_a_listed_name_is_answered_from_the_file_and_any_other_by_dns(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("203.0.113.7 pinned.example\n", encoding="utf-8")
    dns = _Dns()
    resolver = HostsFileResolver(hosts, fallback=dns)

    assert await resolver("Pinned.Example.", 443) == ["203.0.113.7"]
    assert await resolver("other.example", 443) == ["93.184.215.14"]
    assert dns.asked == ["other.example"]


async def test_a_changed_file_is_read_again_at_the_next_lookup(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("8.8.8.8 moving.example\n", encoding="utf-8")
    resolver = HostsFileResolver(hosts, fallback=_Dns())
    assert await resolver("moving.example", 80) == ["8.8.8.8"]

    _rewrite(hosts, "1.1.1.1 moving.example\n")

    assert await resolver("moving.example", 80) == ["1.1.1.1"]


async def test_a_file_that_disappears_keeps_the_last_table_read(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("8.8.8.8 kept.example\n", encoding="utf-8")
    resolver = HostsFileResolver(hosts, fallback=_Dns())

    hosts.unlink()

    assert await resolver("kept.example", 80) == ["8.8.8.8"]


def test_a_missing_file_fails_at_construction(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        HostsFileResolver(tmp_path / "absent")


async def test_the_files_addresses_are_still_checked_by_the_policy(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("8.8.8.8 rebinding.example\n", encoding="utf-8")
    resolver = HostsFileResolver(hosts, fallback=_Dns())
    assert await resolve_allowed("rebinding.example", 80, EgressPolicy(), resolver=resolver) == ["8.8.8.8"]

    _rewrite(hosts, "169.254.169.254 rebinding.example\n")

    with pytest.raises(EgressBlocked, match=r"rebinding\.example resolves to a cloud metadata endpoint"):
        await resolve_allowed("rebinding.example", 80, EgressPolicy(), resolver=resolver)
