"""Keyword search as Qdrant sparse vectors: our own tokenizer, BM25 term weights, IDF from Qdrant.

A chunk's sparse vector holds, for each of its terms, BM25's saturated term frequency
``tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / AVERAGE_LENGTH))``; the collection's sparse
vectors are declared with Qdrant's IDF modifier, so Qdrant multiplies each query term by its
inverse document frequency over the chunks stored *now*. A query's vector holds 1 for each of
its terms, and the dot product is the BM25 score. Keeping the weights in the store (rather
than in a separate BM25 index) means an incremental ingest, a deletion, a restart, another
replica or a CLI ingest into the same Qdrant server all see the same keyword index, with no
second copy to rebuild or keep in sync. The price: the average chunk length is a constant
instead of the corpus's own (chunks are bounded in tokens, so their lengths vary little).

Terms: words lower-cased and stemmed (Snowball English), English stop words dropped. An
identifier such as ``ERR_CONN_RESET``, ``0x80070005``, ``v2.3.1`` or ``searchDocuments``
stays one exact term *and* gives its parts as terms too, so both the exact code and its words
match; a part counts half (``PART_WEIGHT``), since "search" inside ``search_documents`` is weaker
evidence of a passage about searching than the word itself. Terms map to sparse indices by a
stable 32-bit hash.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache

import snowballstemmer  # type: ignore[import-untyped]

__all__ = ["AVERAGE_LENGTH", "K1", "B", "SparseVector", "document_vector", "query_vector", "terms"]

K1 = 1.2
B = 0.75
AVERAGE_LENGTH = 100
"""Terms in a typical chunk (a 256-token chunk of English prose has 90-130 after stop words)."""
PART_WEIGHT = 0.5
"""How much a part of an identifier counts, as a fraction of a whole word."""

_WORD = re.compile(r"\w+(?:[.\-/:]\w+)*")
_CONNECTORS = re.compile(r"[._\-/:]+")
_ASCII_PART = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")  # camelCase, ALLCaps, digits
_STOPWORDS = frozenset(
    """
    a about above after again against all am an and any are aren't as at be because been before being
    below between both but by can could did do does doing don't down during each few for from further
    had has have having he her here hers herself him himself his how i if in into is isn't it it's its
    itself just let me more most my myself no nor not of off on once only or other our ours ourselves
    out over own same she should so some such than that the their theirs them themselves then there
    these they this those through to too under until up very was we were what when where which while who
    whom why will with would you your yours yourself yourselves isn aren wasn weren doesn don didn hasn
    haven hadn won wouldn shouldn couldn
    """.split()  # noqa: SIM905  (a word list reads better as text)
)


@dataclass(frozen=True)
class SparseVector:
    indices: list[int]
    values: list[float]


def terms(text: str) -> Iterator[str]:
    """The BM25 terms of ``text``, in order, repeats included."""
    for term, _ in _weighted_terms(text):
        yield term


def document_vector(text: str) -> SparseVector:
    """BM25 weights of the terms of a chunk (the IDF part is applied by Qdrant)."""
    counts: dict[str, float] = {}
    for term, weight in _weighted_terms(text):
        counts[term] = counts.get(term, 0.0) + weight
    length = sum(counts.values())
    norm = K1 * (1 - B + B * length / AVERAGE_LENGTH)
    weights: dict[int, float] = {}
    for term, tf in counts.items():
        index = _term_index(term)
        weights[index] = weights.get(index, 0.0) + tf * (K1 + 1) / (tf + norm)
    return _sorted(weights)


def query_vector(text: str) -> SparseVector:
    """Each distinct term of a query once (a part of an identifier at PART_WEIGHT): the dot product
    with a chunk's vector is then its BM25 score."""
    weights: dict[int, float] = {}
    for term, weight in _weighted_terms(text):
        index = _term_index(term)
        weights[index] = max(weights.get(index, 0.0), weight)
    return _sorted(weights)


def _weighted_terms(text: str) -> Iterator[tuple[str, float]]:
    for match in _WORD.finditer(unicodedata.normalize("NFKC", text)):
        yield from _terms_of_word(match.group())


def _sorted(weights: dict[int, float]) -> SparseVector:
    indices = sorted(weights)
    return SparseVector(indices=indices, values=[weights[index] for index in indices])


@lru_cache(maxsize=100_000)
def _terms_of_word(word: str) -> tuple[tuple[str, float], ...]:
    lowered = word.lower()
    if lowered in _STOPWORDS:
        return ()
    parts = [part.lower() for part in _parts(word)]
    if len(parts) <= 1 and lowered.isalpha():
        return () if len(lowered) < 2 else ((_stem(lowered), 1.0),)
    # An identifier or a code: the whole of it, then its meaningful parts.
    found = [(lowered, 1.0)]
    found.extend((_stem(part), PART_WEIGHT) for part in parts if part != lowered and _meaningful(part))
    return tuple(found)


def _parts(word: str) -> Iterator[str]:
    for segment in _CONNECTORS.split(word):
        if segment.isascii():
            yield from _ASCII_PART.findall(segment)
        elif segment:
            yield segment


def _meaningful(part: str) -> bool:
    return part.isdigit() or (len(part) >= 2 and part not in _STOPWORDS)


_STEMMER = snowballstemmer.stemmer("english")


@lru_cache(maxsize=100_000)
def _stem(word: str) -> str:
    if not word.isalpha():
        return word
    stem: str = _STEMMER.stemWord(word)
    return stem


@lru_cache(maxsize=200_000)
def _term_index(term: str) -> int:
    return int.from_bytes(hashlib.blake2b(term.encode(), digest_size=4).digest(), "little")
