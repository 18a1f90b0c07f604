"""The bundled model's arithmetic: bfloat16 autocast around encode, in the thread that encodes.

torch's autocast is per thread, and ``MiniLMEmbedder`` encodes in a worker thread: a context entered
in the event loop's thread would silently leave the model in float32. The stand-in model records
what autocast says inside ``encode`` itself.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import torch

from mcp_rag_tool.embeddings import MiniLMEmbedder, native_bfloat16
from mcp_rag_tool.settings import RagSettings

pytestmark = pytest.mark.anyio


class AutocastRecordingModel:
    def __init__(self) -> None:
        self.seen: list[torch.dtype | None] = []

    def get_sentence_embedding_dimension(self) -> int:
        return 2

    def encode(self, texts: list[str], **_: Any) -> npt.NDArray[np.float32]:
        enabled = torch.is_autocast_enabled("cpu")
        self.seen.append(torch.get_autocast_dtype("cpu") if enabled else None)
        return np.array([[1.0, 0.0]] * len(texts), dtype=np.float32)


async def test_a_bfloat16_embedder_encodes_under_bfloat16_autocast_in_its_worker_thread() -> None:
    model = AutocastRecordingModel()
    embedder = MiniLMEmbedder(model, bfloat16=True)

    await embedder.embed(["one"])
    await embedder.embed(["two", "three"])

    assert model.seen == [torch.bfloat16, torch.bfloat16]
    assert embedder.precision == "bfloat16"
    assert not torch.is_autocast_enabled("cpu")  # nothing leaked into the caller's thread


async def test_a_float32_embedder_encodes_without_autocast() -> None:
    model = AutocastRecordingModel()
    embedder = MiniLMEmbedder(model)

    await embedder.embed(["one"])

    assert model.seen == [None]
    assert embedder.precision == "float32"


@pytest.mark.parametrize(
    ("helpers", "expected"),
    [
        ({"_is_avx512_bf16_supported": True, "_is_amx_tile_supported": False}, True),
        ({"_is_avx512_bf16_supported": False, "_is_amx_tile_supported": True}, True),
        ({"_is_avx512_bf16_supported": False, "_is_amx_tile_supported": False}, False),
        ({}, False),  # a torch without these private helpers: unknown, so float32
    ],
)
def test_native_bfloat16_is_avx512_bf16_or_amx_and_false_when_torch_cannot_tell(
    monkeypatch: pytest.MonkeyPatch, helpers: dict[str, bool], expected: bool
) -> None:
    for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"):
        if name in helpers:
            monkeypatch.setattr(torch.cpu, name, lambda answer=helpers[name]: answer)
        else:
            monkeypatch.delattr(torch.cpu, name, raising=False)

    assert native_bfloat16() is expected


def test_the_precision_setting_defaults_to_auto_and_refuses_other_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAG_EMBED_PRECISION", raising=False)

    assert RagSettings(docs_paths=[]).embed_precision == "auto"
    assert RagSettings(docs_paths=[], embed_precision="float32").embed_precision == "float32"
    with pytest.raises(ValueError, match="embed_precision"):
        RagSettings.model_validate({"docs_paths": [], "embed_precision": "int8"})
