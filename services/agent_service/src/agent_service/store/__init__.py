"""Where runs live: their messages, their events, their leases; SQLite or PostgreSQL behind one interface."""

from agent_service.store.caller_keys import CallerKeyStore, KeyNameTaken, StoredCallerKey
from agent_service.store.records import (
    ACTIVE_STATUSES,
    DEFAULT_TENANT,
    ConversationBusy,
    ConversationRecord,
    ConversationSummary,
    LeaseLost,
    ModelUsage,
    NewRun,
    RunRecord,
    RunStatus,
    Step,
    StoredEvent,
    StoreError,
)
from agent_service.store.run_store import RunStore

__all__ = [
    "ACTIVE_STATUSES",
    "DEFAULT_TENANT",
    "CallerKeyStore",
    "ConversationBusy",
    "ConversationRecord",
    "ConversationSummary",
    "KeyNameTaken",
    "LeaseLost",
    "ModelUsage",
    "NewRun",
    "RunRecord",
    "RunStatus",
    "RunStore",
    "Step",
    "StoreError",
    "StoredCallerKey",
    "StoredEvent",
]
