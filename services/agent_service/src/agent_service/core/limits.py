"""What a run may spend, and the one question the loop asks about it before each LLM call."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from suite_common.deadline import Deadline
from suite_common.wire import BudgetName, RunFinishReason, Usage

__all__ = ["DEADLINE_SLACK_SECONDS", "RunLimits", "SpendGuard", "Stop"]

DEADLINE_SLACK_SECONDS = 0.25
"""A callee told "X ms left" gives up at about the moment the run does; a failure this close
to the deadline is the deadline, not an error of the callee."""


@dataclass(frozen=True, slots=True)
class Stop:
    """Why a run ends instead of making its next LLM call: its finish reason and, for ``budget``, which one."""

    reason: RunFinishReason
    budget: BudgetName | None = None


@dataclass(frozen=True, slots=True)
class RunLimits:
    """The limits of one run; the loop reads them through ``stop_before_call`` only.

    The monthly budgets of the run's tenant and end user are not here but in the run's ``SpendGuard``
    (``RunPlan.spending``, see ``agent_service.admission.budgets``), which the loop asks right after this.
    """

    max_iterations: int
    deadline: Deadline
    """Started when the request arrived: tool discovery counts against it too."""
    max_total_tokens: int | None = None
    """Input and output tokens of all the run's LLM calls together; ``None``: no limit."""
    max_cost_usd: float | None = None
    """The cost of all the run's LLM calls together, in US dollars at the catalog's prices; ``None``: no limit.
    Calls of models without a price cost nothing here."""

    def stop_before_call(self, iterations: int, usage: Usage) -> Stop | None:
        """Why the run ends instead of making its next LLM call, ``iterations`` rounds done and ``usage`` spent;
        ``None`` to go on. Checked in this order: rounds, deadline, tokens, cost."""
        if iterations >= self.max_iterations:
            return Stop("max_iterations")
        if self.deadline.expired():
            return Stop("deadline")
        if self.max_total_tokens is not None and usage.total_tokens >= self.max_total_tokens:
            return Stop("budget", "run_tokens")
        if self.max_cost_usd is not None and (usage.cost_usd or 0.0) >= self.max_cost_usd:
            return Stop("budget", "run_cost")
        return None

    def out_of_time(self) -> bool:
        """A failure now is the deadline's doing (see ``DEADLINE_SLACK_SECONDS``), not the callee's."""
        return self.deadline.remaining() <= DEADLINE_SLACK_SECONDS


class SpendGuard(Protocol):
    """A run's monthly budgets (its tenant's and its end user's): asked before each LLM call, told after each."""

    async def exhausted(self) -> BudgetName | None:
        """The budget already used up (the run ends with finish reason ``budget``), or ``None`` to go on; raises
        ``UpstreamError`` (503 ``limits_unavailable``) when the spend cannot be read: no call is made unaccounted."""

    async def spent(self, usage: Usage) -> None:
        """One LLM call's ``usage``, counted against the budgets; never raises (a failure is logged)."""
