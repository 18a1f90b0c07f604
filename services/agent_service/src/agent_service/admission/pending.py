"""Writes to the shared Redis sent off the answer's path: a run's slot given back, a call's usage added, a tool's
result stored in the tool-result cache (``engine.tool_cache``, which serves a value under way itself).

Each is a task of its own, started where the write is due and not awaited there, so that the round trip it costs
(Redis) overlaps what the run does next, or comes after its answer. Whatever must see a write waits for it instead:

- the run's own check before its next LLM call waits for its previous call's add (``budgets._RunSpend``);
- a new run of the tenant admitted on this replica waits for every write of that tenant started here before it
  (``settled``): on one replica a run sent after another's answer sees its slot free, its last call counted and
  its tool results stored, exactly as when they were awaited;
- the service's shutdown waits for them all (``drain``, bounded), before the Redis client closes.

A write never raises here: each logs its own failure (the slot then expires on its own; an add that failed is
carried to the run's next one; a result not stored is a miss later). A write cancelled with its run would lose
what it writes: a task of its own is not.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import anyio

from suite_common.logging import get_logger

__all__ = ["DRAIN_SECONDS", "PendingWrites"]

_log = get_logger("agent_service.pending_writes")

DRAIN_SECONDS = 5.0
"""The most a shutdown waits for the writes still under way (each is bounded by the Redis timeouts already)."""


class PendingWrites:
    """The writes started and not finished yet, per tenant."""

    def __init__(self) -> None:
        self._by_tenant: dict[str, set[asyncio.Task[None]]] = {}

    def start(self, tenant: str, write: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """Run ``write`` in a task of its own, counted among ``tenant``'s until it ends."""
        task = asyncio.get_running_loop().create_task(self._logged(write))
        tasks = self._by_tenant.setdefault(tenant, set())
        tasks.add(task)
        task.add_done_callback(lambda done: self._ended(tenant, done))
        return task

    @staticmethod
    async def _logged(write: Coroutine[Any, Any, None]) -> None:
        try:
            await write
        except Exception as error:  # a bug: the write's own failures are logged where they happen
            _log.error("pending_write_failed", exc_info=error)

    def _ended(self, tenant: str, task: asyncio.Task[None]) -> None:
        tasks = self._by_tenant.get(tenant)
        if tasks is not None:
            tasks.discard(task)
            if not tasks:
                del self._by_tenant[tenant]

    def pending(self, tenant: str | None = None) -> int:
        """How many writes (of ``tenant``, or of all) are under way."""
        if tenant is not None:
            return len(self._by_tenant.get(tenant, ()))
        return sum(len(tasks) for tasks in self._by_tenant.values())

    async def settled(self, tenant: str) -> None:
        """Once every write of ``tenant`` started before this call has ended (at once when there is none)."""
        tasks = self._by_tenant.get(tenant)
        if tasks:
            await asyncio.wait(list(tasks))

    async def drain(self) -> None:
        """Once every write under way has ended, or ``DRAIN_SECONDS`` have passed; shielded (the service is
        stopping: what is not written now is lost, or left to expire)."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(DRAIN_SECONDS) as bounded:
            while self._by_tenant:
                await asyncio.wait([task for tasks in self._by_tenant.values() for task in tasks])
        if bounded.cancelled_caught:
            _log.warning("pending_writes_abandoned", writes=self.pending())
