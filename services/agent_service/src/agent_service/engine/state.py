"""A run's state as the loop and its tool dispatch share it: the conversation so far, what the run appended, the
current round's calls and their results."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agent_service.core.context import FitMemo
from agent_service.core.images import has_images
from agent_service.core.run import AskedInput
from suite_common.wire import Message, ToolCall, Usage

__all__ = ["RunState"]


@dataclass
class RunState:
    conversation: list[Message]
    appended: list[Message] = field(default_factory=list)
    iterations: int = 0
    usage: Usage = field(default_factory=Usage)
    pending: list[ToolCall] = field(default_factory=list)
    """Tool calls of the current round, in the order the model made them."""
    finished: dict[str, Message] = field(default_factory=dict)
    """Result messages of the current round's calls that have finished, by tool call id."""
    turn_position: int = 0
    """The position in ``conversation`` of the current round's assistant turn."""
    warnings: dict[str, None] = field(default_factory=dict)
    """The LLM calls' warnings, each once, in the order they came (a dict keeps it)."""
    output: Any = None
    """With ``responseFormat``: the final answer parsed, once valid (``engine.output``)."""
    context: FitMemo = field(default_factory=FitMemo)
    """What the context fitter knows of the run's conversation (``agent_service.engine.context``)."""
    waiting: list[ToolCall] = field(default_factory=list)
    """The current round's calls held for a person's approval (``engine.approvals``): the run waits once the
    others have finished."""
    asked: list[AskedInput] = field(default_factory=list)
    """The current round's questions of tool servers (``engine.questions``): their calls wait at the gateway, the
    run waits for the answers once the round's other calls have finished."""
    image_bytes: int = 0
    """What the run's own images hold so far, its request's and its tool results' (bounded: ``engine.images``)."""
    images: bool = False
    """The conversation has an image (set when it starts with one or one is appended): a run without any never
    scans its messages for images again (``engine.images``)."""

    def __post_init__(self) -> None:
        self.images = has_images(self.conversation)

    @property
    def appended_from(self) -> int:
        return len(self.conversation) - len(self.appended)

    def append(self, message: Message) -> None:
        self.conversation.append(message)
        self.appended.append(message)
        if not self.images and not isinstance(message.content, str | None) and message.images:
            self.images = True

    def close_round(self, reason: str) -> None:
        """Append the round's results in call order; a call without one gets an error saying ``reason``.

        Every tool call then has its result, so the caller can continue the conversation.
        """
        for call in self.pending:
            result = self.finished.get(call.id)
            self.append(result or Message(role="tool", tool_call_id=call.id, content=reason, is_error=True))
        self.pending, self.finished = [], {}
