"""What a run may spend, and the one question the loop asks about it before each LLM call."""

from __future__ import annotations

from dataclasses import dataclass

from suite_common.deadline import Deadline
from suite_common.wire import RunFinishReason

__all__ = ["DEADLINE_SLACK_SECONDS", "RunLimits"]

DEADLINE_SLACK_SECONDS = 0.25
"""A callee told "X ms left" gives up at about the moment the run does; a failure this close
to the deadline is the deadline, not an error of the callee."""


@dataclass(frozen=True, slots=True)
class RunLimits:
    """The limits of one run; the loop reads them through ``stop_before_call`` only.

    The token and cost limits (finish reason ``budget``) join here as fields with their check in
    ``stop_before_call``, and so does the policy object asked before each LLM call (DESIGN.md,
    "State"): the loop keeps asking this one question, whatever the limits become.
    """

    max_iterations: int
    deadline: Deadline
    """Started when the request arrived: tool discovery counts against it too."""

    def stop_before_call(self, iterations: int) -> RunFinishReason | None:
        """Why the run ends instead of making its next LLM call, ``iterations`` rounds done; ``None`` to go on."""
        if iterations >= self.max_iterations:
            return "max_iterations"
        if self.deadline.expired():
            return "deadline"
        return None

    def out_of_time(self) -> bool:
        """A failure now is the deadline's doing (see ``DEADLINE_SLACK_SECONDS``), not the callee's."""
        return self.deadline.remaining() <= DEADLINE_SLACK_SECONDS
