"""Where runs live: their messages, their events, their leases; SQLite or PostgreSQL behind one interface."""

from agent_service.store.caller_keys import CallerKeyStore, KeyNameTaken, StoredCallerKey
from agent_service.store.records import (
    ACTIVE_STATUSES,
    ConversationBusy,
    ConversationFull,
    ConversationLimits,
    ConversationRecord,
    ConversationSummary,
    ConversationTooLarge,
    LeaseLost,
    ModelUsage,
    NewRun,
    RunRecord,
    RunStatus,
    Step,
    StoredEvent,
    StoreError,
    UnknownCursor,
)
from agent_service.store.run_store import RunStore

__all__ = [
    "ACTIVE_STATUSES",
    "CallerKeyStore",
    "ConversationBusy",
    "ConversationFull",
    "ConversationLimits",
    "ConversationRecord",
    "ConversationSummary",
    "ConversationTooLarge",
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
    "UnknownCursor",
]
