"""MiniLMEmbedder never runs two encodes at once, even after a cancelled embed left its encode running.

The model is a stand-in (the real one takes seconds to load): it takes a while to encode and notes
whether an encode ever started while another was still running, which the real tokenizer does not
survive.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import anyio
import numpy as np
import numpy.typing as npt
import pytest

from mcp_rag_tool.embeddings import MiniLMEmbedder

pytestmark = pytest.mark.anyio


class SlowOverlapDetectingModel:
    """Encodes every text as [1, 0] in ``encode_seconds`` (simulated work), counting encodes in progress."""

    def __init__(self, encode_seconds: float) -> None:
        self._encode_seconds = encode_seconds
        self._guard = threading.Lock()
        self.running = 0
        self.most_running = 0
        self.encoded: list[list[str]] = []
        self.started = threading.Event()

    def get_sentence_embedding_dimension(self) -> int:
        return 2

    def encode(self, texts: list[str], **_: Any) -> npt.NDArray[np.float32]:
        with self._guard:
            self.running += 1
            self.most_running = max(self.most_running, self.running)
            self.encoded.append(list(texts))
        self.started.set()
        try:
            time.sleep(self._encode_seconds)  # long enough for another call to arrive meanwhile
        finally:
            with self._guard:
                self.running -= 1
        return np.array([[1.0, 0.0]] * len(texts), dtype=np.float32)


async def test_a_cancelled_embed_returns_at_once_and_the_next_encode_waits_for_the_abandoned_one() -> None:
    model = SlowOverlapDetectingModel(encode_seconds=0.5)
    embedder = MiniLMEmbedder(model)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(embedder.embed, ["given up"])
            await anyio.to_thread.run_sync(model.started.wait, 5)
            tasks.cancel_scope.cancel()  # like a search whose client went away
        encodes_running_after_cancel = model.running
        vectors = await embedder.embed(["wanted"])

    assert encodes_running_after_cancel == 1  # the cancelled call did not wait for its encode
    assert vectors == [[1.0, 0.0]]
    assert model.encoded == [["given up"], ["wanted"]]
    assert model.most_running == 1, "two encodes ran at the same time"
