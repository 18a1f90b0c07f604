"""Runs kept: stored step by step, followed from any replica, cancelled, taken over after a crash."""

from agent_service.runs.journal import TERMINAL_EVENTS, EventSink, LiveSink, RunJournal, RunMoved
from agent_service.runs.running import StartedRun
from agent_service.runs.service import AgentRuns

__all__ = ["TERMINAL_EVENTS", "AgentRuns", "EventSink", "LiveSink", "RunJournal", "RunMoved", "StartedRun"]
