"""Runs kept: stored step by step, followed from any replica, cancelled, taken over after a crash."""

from agent_service.runs.journal import TERMINAL_EVENTS, LiveSink, RunJournal, RunMoved, StoredEventSink
from agent_service.runs.running import StartedRun
from agent_service.runs.service import AgentRuns

__all__ = ["TERMINAL_EVENTS", "AgentRuns", "LiveSink", "RunJournal", "RunMoved", "StartedRun", "StoredEventSink"]
