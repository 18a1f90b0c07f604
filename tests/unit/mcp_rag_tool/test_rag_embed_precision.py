"""The bundled model's arithmetic: when "auto" means bfloat16, and the setting that picks it.

Loading the real model in each precision, and what its vectors are then, is in
tests/integration/mcp_rag_tool/test_rag_bfloat16_vectors.py.
"""

from __future__ import annotations

import pytest
import torch

from mcp_rag_tool.embeddings import native_bfloat16
from mcp_rag_tool.settings import RagSettings

pytestmark = pytest.mark.anyio


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
