"""Passages that occur word for word on many documents: boilerplate that tells no page from another.

rustdoc repeats the same lines on every type page: a blanket implementation's "Returns the argument
unchanged.", "Immutably borrows from an owned value. Read more", "Performs the conversion." (the
Rust standard library's 362 pages of ``bench/rag_docs/rust_std.json``: 49% of the chunks carry a
passage found on 5 pages or more). Such a chunk matches a question about conversions or borrowing
on every page alike, crowds the candidates of both retrievers, and pulls each type page's document
vector toward the same generic point. A passage is **common** when at least ``min_documents``
documents hold it (text compared with case and runs of whitespace folded; a chunk's heading path,
which names its page, is not part of it). Local mode leaves common chunks out of the chunk rankings
and out of the document vectors (``store``); they stay stored and become searchable again when
enough of the documents holding them are gone.

Pure bookkeeping: which chunk holds which passage, on which document, and whose status changed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["CommonPassages", "StatusChange", "passage_key"]


def passage_key(text: str) -> str:
    """What two chunks share when their passages are the same text (case and whitespace folded)."""
    return hashlib.blake2b(" ".join(text.casefold().split()).encode(), digest_size=12).hexdigest()


@dataclass
class StatusChange:
    """Chunks that became common (to hide) or stopped being common (to show again), and their documents."""

    hide: set[str] = field(default_factory=set)
    show: set[str] = field(default_factory=set)
    sources: set[str] = field(default_factory=set)

    def merge(self, later: StatusChange) -> None:
        """This change followed by ``later``, as one."""
        self.hide = (self.hide - later.show) | later.hide
        self.show = (self.show - later.hide) | later.show
        self.sources |= later.sources


class CommonPassages:
    """Which chunks hold a passage that at least ``min_documents`` documents hold (0: none ever is)."""

    def __init__(self, min_documents: int) -> None:
        self._min_documents = min_documents
        self._passage_of: dict[str, tuple[str, str]] = {}
        """chunk id -> (passage key, source)"""
        self._holders: dict[str, dict[str, set[str]]] = {}
        """passage key -> source -> chunk ids"""
        self._chunks_of: dict[str, set[str]] = {}
        """source -> chunk ids"""

    def is_common(self, chunk_id: str) -> bool:
        entry = self._passage_of.get(chunk_id)
        return entry is not None and self._common(entry[0])

    def kept_chunks(self, source: str) -> list[str]:
        """The document's chunks whose passages are not common (what its document vector averages)."""
        return [chunk_id for chunk_id in self._chunks_of.get(source, ()) if not self.is_common(chunk_id)]

    def has_common(self, source: str) -> bool:
        return any(self.is_common(chunk_id) for chunk_id in self._chunks_of.get(source, ()))

    def add(self, chunks: Iterable[tuple[str, str, str]]) -> StatusChange:
        """Record ``(chunk id, source, passage text)``s; a chunk id recorded before is replaced."""
        batch = list(chunks)
        change = self.remove(chunk_id for chunk_id, _, _ in batch)
        keys = {passage_key(text) for _, _, text in batch}
        before = {key for key in keys if self._common(key)}
        for chunk_id, source, text in batch:
            key = passage_key(text)
            self._passage_of[chunk_id] = (key, source)
            self._holders.setdefault(key, {}).setdefault(source, set()).add(chunk_id)
            self._chunks_of.setdefault(source, set()).add(chunk_id)
        for key in keys:
            if key in before or self._common(key):
                # a passage already common: only the new chunks are to hide; one that just became common: all of them
                new = {chunk_id for chunk_id, _, text in batch if passage_key(text) == key}
                self._flip(key, change.hide, only=new if key in before else None, change=change)
        change.show -= change.hide
        return change

    def remove(self, ids: Iterable[str]) -> StatusChange:
        """Forget chunks (deleted); chunks whose passage thereby stops being common are to show again."""
        change = StatusChange()
        touched: set[str] = set()
        for chunk_id in ids:
            entry = self._passage_of.pop(chunk_id, None)
            if entry is None:
                continue
            key, source = entry
            if self._common(key):
                touched.add(key)
            holders = self._holders[key]
            holders[source].discard(chunk_id)
            if not holders[source]:
                del holders[source]
            if not holders:
                del self._holders[key]
            self._chunks_of[source].discard(chunk_id)
            if not self._chunks_of[source]:
                del self._chunks_of[source]
            change.sources.add(source)
        for key in touched:
            if not self._common(key):
                self._flip(key, change.show, only=None, change=change)
        return change

    def _common(self, key: str) -> bool:
        return self._min_documents > 0 and len(self._holders.get(key, ())) >= self._min_documents

    def _flip(self, key: str, into: set[str], *, only: set[str] | None, change: StatusChange) -> None:
        for source, ids in self._holders.get(key, {}).items():
            flipped = ids if only is None else ids & only
            if flipped:
                into.update(flipped)
                change.sources.add(source)
