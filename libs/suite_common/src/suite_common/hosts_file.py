"""A hosts-format file consulted before DNS: the SSRF guard's resolver when a deployment pins names.

Like curl's ``--resolve`` or ``/etc/hosts``, but read by the guard itself (``MCP_CLIENT_HOSTS_FILE``,
``WEB_SEARCH_HOSTS_FILE``): a name the file lists resolves to the file's addresses, any other name
through ``system_resolver``. The addresses still go through the egress policy like DNS answers: the
file says where a name points, never that the address is allowed. The file is read again when it
changes (its modification time, size or inode), so a mounted ConfigMap or a test can repoint a name
without a restart; a file that cannot be read any more keeps the last table read (logged once).
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Sequence
from pathlib import Path

from suite_common.logging import get_logger
from suite_common.ssrf import Resolver, normalize_host, system_resolver

__all__ = ["HostsFileResolver", "parse_hosts"]

_log = get_logger("suite_common.hosts_file")

_Stamp = tuple[int, int, int]


def parse_hosts(text: str, *, source: str = "hosts file") -> dict[str, list[str]]:
    """Name -> addresses, in file order, from ``<address> <name> [<name>...]`` lines (``#`` starts a comment).

    A line whose first word is not an IP address is skipped and logged; names are compared as
    ``normalize_host`` leaves them (lower case, no trailing dot).
    """
    table: dict[str, list[str]] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        address, names = words[0], words[1:]
        try:
            canonical = str(ipaddress.ip_address(address))
        except ValueError:
            _log.warning("hosts_file_line_skipped", source=source, line=number, reason="not an IP address")
            continue
        for name in names:
            addresses = table.setdefault(normalize_host(name), [])
            if canonical not in addresses:
                addresses.append(canonical)
    return table


class HostsFileResolver:
    """A ``Resolver``: the names of a hosts-format file first, then ``fallback`` (the system's DNS).

    Reads the file at construction (an unreadable file raises ``OSError`` then, so a misconfigured
    service stops at start-up) and again at a lookup after it changed.
    """

    def __init__(self, path: Path, *, fallback: Resolver = system_resolver) -> None:
        self._path = path
        self._fallback = fallback
        self._stamp: _Stamp | None = None
        self._table: dict[str, list[str]] = {}
        self._unreadable_logged = False
        self._load(self._stat())

    @property
    def path(self) -> Path:
        return self._path

    def _stat(self) -> _Stamp:
        info = os.stat(self._path)
        return info.st_mtime_ns, info.st_size, info.st_ino

    def _load(self, stamp: _Stamp) -> None:
        self._table = parse_hosts(self._path.read_text(encoding="utf-8"), source=str(self._path))
        self._stamp = stamp
        self._unreadable_logged = False

    def _refresh(self) -> None:
        # A stat per lookup (microseconds, a local file) so a change is seen at the next connection.
        try:
            stamp = self._stat()
            if stamp != self._stamp:
                self._load(stamp)
                _log.info("hosts_file_reloaded", path=str(self._path), names=len(self._table))
        except (OSError, UnicodeError) as error:
            if not self._unreadable_logged:
                _log.warning("hosts_file_unreadable", path=str(self._path), error=str(error), kept=len(self._table))
                self._unreadable_logged = True

    def lookup(self, host: str) -> list[str] | None:
        """The file's addresses for ``host``, or ``None`` when the file does not list it."""
        self._refresh()
        addresses = self._table.get(normalize_host(host))
        return list(addresses) if addresses else None

    async def __call__(self, host: str, port: int) -> Sequence[str]:
        pinned = self.lookup(host)
        if pinned is not None:
            return pinned
        return await self._fallback(host, port)
