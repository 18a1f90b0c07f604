"""A structured answer (``responseFormat``): the run's final text parsed and validated, repaired once, else failed.

The loop asks ``AnswerCheck.judge`` about each final answer (a turn without tool calls). A valid one becomes the
run's ``output``; the first invalid one is kept in the conversation and followed by a user message saying what
failed (``repair``), and the loop goes on for one more round; a second invalid answer fails the run with
``invalid_output``. Pure: no I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from jsonschema.exceptions import best_match
from referencing.exceptions import Unresolvable

from agent_service.core.answer_schema import answer_validator
from agent_service.core.errors import UpstreamError
from suite_common.wire import Message, ResponseFormat

__all__ = ["INVALID_OUTPUT", "INVALID_OUTPUT_STATUS", "AnswerCheck", "Verdict"]

INVALID_OUTPUT = "invalid_output"
"""The run's error code when its final answer is still not valid after the repair round."""

INVALID_OUTPUT_STATUS = 422
"""A run that failed this way answers ``stream: false`` with 422: the request was understood, its answer could not
be given in the form it asked for."""

_MAX_PROBLEM_CHARS = 500


@dataclass(frozen=True)
class Verdict:
    """What the loop does with a final answer: ``output`` (valid), or ``repair`` (one more round, with that user
    message), or ``failure`` (the run fails with it)."""

    output: Any = None
    repair: Message | None = None
    failure: UpstreamError | None = None


class AnswerCheck:
    """The final answers of one run against its ``response_format`` (``json_schema`` or ``json_object``)."""

    def __init__(self, response_format: ResponseFormat) -> None:
        schema = response_format.json_schema
        self._validator = answer_validator(schema.schema_) if schema is not None else None
        self._repaired = False
        self._answered = False

    @classmethod
    def of(cls, response_format: ResponseFormat | None, *, repaired: bool = False) -> AnswerCheck | None:
        """The check a run needs; ``None``: its answer is plain text. ``repaired``: the run (taken over, or resumed
        after approvals) already had its repair round."""
        if response_format is None or response_format.type == "text":
            return None
        check = cls(response_format)
        check._repaired = repaired
        return check

    def judge(self, answer: Message) -> Verdict:
        try:
            problem, value = self._problem(answer.text or "")
        except Unresolvable as error:  # a $ref of the schema (remote, or to nowhere): no answer could ever pass
            message = f"The responseFormat schema cannot be applied: it has a $ref that does not resolve ({error})."
            return Verdict(failure=UpstreamError(INVALID_OUTPUT, _clip(message), status=INVALID_OUTPUT_STATUS))
        except RecursionError:  # references that loop where planning's probe did not reach: a failed run, not a crash
            message = "The responseFormat schema cannot be applied: its references loop forever."
            return Verdict(failure=UpstreamError(INVALID_OUTPUT, message, status=INVALID_OUTPUT_STATUS))
        if problem is None:
            self._answered = True
            return Verdict(output=value)
        if self._repaired:
            message = f"The model's final answer is not valid JSON of the requested format, after one repair: {problem}"
            return Verdict(failure=UpstreamError(INVALID_OUTPUT, message, status=INVALID_OUTPUT_STATUS))
        self._repaired = True
        prompt = (
            f"Your answer is not valid: {problem} Answer again with only the JSON value, no other text and no "
            "code fences, following the requested format exactly."
        )
        return Verdict(repair=Message(role="user", content=prompt))

    def unanswered(self) -> UpstreamError | None:
        """The failure of a run stopped (out of iterations or budget) after its repair was asked for and before a
        valid answer came: it has no valid output either, so it fails as a second invalid answer does."""
        if not self._repaired or self._answered:
            return None
        message = (
            "The run stopped before the model answered its repair request with valid JSON of the requested format."
        )
        return UpstreamError(INVALID_OUTPUT, message, status=INVALID_OUTPUT_STATUS)

    def _problem(self, text: str) -> tuple[str | None, Any]:
        """``(why the answer is invalid, None)`` or ``(None, its value)``."""
        try:
            value = json.loads(text)
        except ValueError as error:
            return f"it is not JSON ({error}).", None
        if self._validator is None:
            return (None, value) if isinstance(value, dict) else ("it is not a JSON object.", None)
        mismatch = best_match(self._validator.iter_errors(value))
        if mismatch is None:
            return None, value
        where = "/".join(str(part) for part in mismatch.absolute_path)
        return f"at {'/' + where if where else 'the top level'}: {_clip(mismatch.message)}.", None


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_PROBLEM_CHARS else text[:_MAX_PROBLEM_CHARS] + "..."
