"""The run store: one class over SQLAlchemy Core, for SQLite (aiosqlite) and PostgreSQL (asyncpg).

Every method is one short transaction. Every failure of the database surfaces as ``StoreError``
(``LeaseLost`` and ``ConversationBusy`` are its kinds), never as a driver's own exception.
Times are the replica's wall clock, in UTC.
"""

from __future__ import annotations

from datetime import datetime

from agent_service.store.records import ConversationRecord, NewRun, RunRecord, Step, StoredEvent
from suite_common.wire import Message

__all__ = ["RunStore"]


class RunStore:
    @classmethod
    async def open(cls, url: str, *, migrate: bool = True) -> RunStore:
        """``url``: ``sqlite:///path`` (the folder is created) or ``postgresql://...``; the async drivers are chosen
        here. ``migrate``: bring the schema to the newest revision first (Alembic; several replicas starting at
        once take turns)."""
        raise NotImplementedError

    @property
    def backend(self) -> str:
        """``sqlite`` or ``postgresql``."""
        raise NotImplementedError

    async def aclose(self) -> None:
        raise NotImplementedError

    async def ping(self) -> None:
        """Raises ``StoreError`` when the database does not answer (readiness)."""
        raise NotImplementedError

    # --- a run's life ---------------------------------------------------------------------------------

    async def create_run(self, run: NewRun, *, owner: str, lease_seconds: float) -> list[Message]:
        """Store a new run, status ``processing``, leased to ``owner``, with its input messages; creates its
        conversation when the id is new. Returns the conversation's earlier messages (every earlier run's, in
        order; empty without a conversation). Raises ``ConversationBusy`` when the conversation has an active run."""
        raise NotImplementedError

    async def record(self, run_id: str, step: Step, *, owner: str) -> None:
        """Write one step in one transaction: upsert its messages, insert its events, update the run's status and
        counters (and ``updated_at``). Raises ``LeaseLost`` (writing nothing) when ``owner`` no longer holds the
        run's lease or the run is no longer active."""
        raise NotImplementedError

    # --- reading --------------------------------------------------------------------------------------

    async def get_run(self, run_id: str) -> RunRecord | None:
        raise NotImplementedError

    async def run_messages(self, run_id: str) -> list[Message]:
        """The run's own messages (input, then what the run added), by position."""
        raise NotImplementedError

    async def earlier_messages(self, run_id: str) -> list[Message]:
        """The messages of the run's conversation that came before it (empty without a conversation)."""
        raise NotImplementedError

    async def events_after(self, run_id: str, after: int, *, limit: int = 1000) -> list[StoredEvent]:
        """Stored events with ``seq > after``, in order, at most ``limit``."""
        raise NotImplementedError

    async def get_conversation(self, conversation_id: str) -> ConversationRecord | None:
        raise NotImplementedError

    # --- leases ---------------------------------------------------------------------------------------

    async def request_cancel(self, run_id: str) -> RunRecord | None:
        """Mark the run's cancel request (the owner sees it when it renews its leases); ``None`` for an unknown id.
        A run already final is returned unchanged."""
        raise NotImplementedError

    async def renew_leases(self, owner: str, run_ids: list[str], *, lease_seconds: float) -> set[str]:
        """Push the lease of ``owner``'s active runs among ``run_ids`` to now + ``lease_seconds``. Returns the ids
        among them whose cancel was requested, and those ``owner`` no longer holds (taken over, or no longer
        active): both stop."""
        raise NotImplementedError

    async def release(self, owner: str, run_ids: list[str]) -> None:
        """Let another replica take these runs at once (the lease expires now): a replica shutting down."""
        raise NotImplementedError

    async def claim_expired(
        self, owner: str, *, lease_seconds: float, abandon_before: datetime, limit: int
    ) -> list[RunRecord]:
        """Take over active runs whose lease has expired: owner, lease and ``resumes + 1`` set, returned. Several
        replicas claim at once without taking the same run twice (``FOR UPDATE SKIP LOCKED`` on PostgreSQL).
        A run whose lease expired before ``abandon_before`` is not claimed but marked ``failed`` with the error
        ``abandoned`` (see ``fail_abandoned``)."""
        raise NotImplementedError

    async def fail_abandoned(self, *, abandon_before: datetime) -> int:
        """Mark ``failed`` (error ``abandoned``: no replica held the run's lease for too long) every active run whose
        lease expired before ``abandon_before``, with an ``error`` event appended; returns how many."""
        raise NotImplementedError

    async def finish(self, run_id: str, step: Step, *, owner: str | None) -> None:
        """``record`` for a final step; with ``owner=None`` whatever holds the lease (a run failed by the sweeper,
        a cancel for a run nobody runs). Clears the lease."""
        raise NotImplementedError
