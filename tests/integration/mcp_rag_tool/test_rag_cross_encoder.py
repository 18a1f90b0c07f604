"""The cross-encoder code path, offline: a tiny cross-encoder built here (random weights, the bundled
model's tokenizer) is loaded from a folder by RAG_RERANK_MODEL_PATH and decides the order of results.

Its judgement is meaningless; what is tested is that its scores are the model's own, and that they,
not the fused ranking, order what the tool returns.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import anyio
import pytest
from mcp import Client

from mcp_rag_tool.embeddings import MiniLMEmbedder
from mcp_rag_tool.rerank import CrossEncoderScorer
from mcp_rag_tool.server import build_server
from mcp_rag_tool.settings import IN_MEMORY, RagSettings
from mcp_rag_tool.tokens import WordPieceCounter, bundled_model_path

pytestmark = pytest.mark.anyio

PASSAGES = [
    "A solar eclipse happens when the moon passes between the earth and the sun.",
    "Feed the sourdough starter flour and water twice a day.",
    "Retries use exponential backoff with jitter and a budget.",
    "The lunar eclipse is visible from the whole night side of the earth.",
]


@pytest.fixture(scope="module")
def tiny_cross_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    folder = tmp_path_factory.mktemp("tiny-cross-encoder")
    torch.manual_seed(7)
    config = BertConfig(
        vocab_size=30522,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=512,
    )
    config.num_labels = 1  # one relevance logit, as cross-encoders for reranking have
    BertForSequenceClassification(config).save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"):
        shutil.copy(bundled_model_path() / name, folder / name)
    return folder


def _reference_probabilities(folder: Path, query: str, passages: list[str]) -> list[float]:
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    batch = tokenizer([query] * len(passages), passages, padding=True, truncation=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**batch).logits.squeeze(-1)
    return [float(value) for value in torch.sigmoid(logits)]


async def test_scores_are_the_models_own_probabilities(tiny_cross_encoder: Path) -> None:
    scorer = await CrossEncoderScorer.load(tiny_cross_encoder)

    scores = await scorer.score("when is there a solar eclipse", PASSAGES)

    expected = _reference_probabilities(tiny_cross_encoder, "when is there a solar eclipse", PASSAGES)
    assert scores == pytest.approx(expected, abs=1e-5)
    assert len(set(scores)) == len(PASSAGES)


async def test_a_missing_model_folder_is_an_error_naming_the_setting(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="RAG_RERANK_MODEL_PATH"):
        await CrossEncoderScorer.load(tmp_path / "absent")


async def test_the_server_orders_results_by_the_cross_encoder(
    tiny_cross_encoder: Path, minilm: MiniLMEmbedder, wordpiece: WordPieceCounter, tmp_path: Path
) -> None:
    for number, passage in enumerate(PASSAGES):
        (tmp_path / f"p{number}.txt").write_text(passage)
    settings = RagSettings(
        docs_paths=[tmp_path], qdrant_path=IN_MEMORY, rerank_model_path=tiny_cross_encoder, mmr_lambda=1.0
    )
    query = "when is there a solar eclipse"

    async with Client(build_server(settings, minilm, counter=wordpiece)) as client:
        with anyio.fail_after(60):
            result = await client.call_tool("search_documents", {"queries": [query], "top_k": 4})

    assert result.structured_content is not None
    returned = result.structured_content["results"]
    # What the cross-encoder read: each passage under its title (the file name), as the tool sends it.
    probabilities = _reference_probabilities(
        tiny_cross_encoder, query, [f"p{number}.txt\n\n{passage}" for number, passage in enumerate(PASSAGES)]
    )
    expected_order = sorted(range(len(PASSAGES)), key=lambda number: -probabilities[number])
    assert [r["source"] for r in returned] == [f"p{number}.txt" for number in expected_order]
    assert [r["score"] for r in returned] == pytest.approx(
        [probabilities[number] for number in expected_order], abs=1e-3
    )
