"""What the in-process indexes of local mode share: one row per chunk, its id, and what filters look at.

Both the BM25 inverted index (``sparse_index``) and the dense matrix (``dense_index``) give every
chunk a slot, mark deleted slots dead rather than moving the others, and pick their best rows
among those a search's filter admits: chunks under one of the source prefixes (if any) carrying
one of the tags (if any), as the store's Qdrant filter (``MatchAny`` on each field) does.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt

__all__ = ["IndexRows", "prefix_candidates"]


def prefix_candidates(source_prefix: str | None) -> tuple[str, ...]:
    """The ``source_prefixes`` values a prefix filter matches: a folder as given, a file or its folder."""
    if source_prefix is None:
        return ()
    return (source_prefix,) if source_prefix.endswith("/") else (source_prefix, source_prefix + "/")


class IndexRows:
    """Slots of chunks: ids, source prefixes and tags, and which slots are alive."""

    def __init__(self) -> None:
        self._slot_of: dict[str, int] = {}
        self._ids: list[str] = []
        self._prefixes: list[tuple[str, ...]] = []
        self._tags: list[tuple[str, ...]] = []
        self._alive = np.zeros(0, dtype=bool)
        self._live = 0

    def __len__(self) -> int:
        return self._live

    def _append_rows(self, rows: Sequence[tuple[str, tuple[str, ...], tuple[str, ...]]]) -> int:
        """Give each ``(id, source prefixes, tags)`` the next slot (alive); the first slot given."""
        first = len(self._ids)
        if len(self._alive) < first + len(rows):
            grown = np.zeros(max(2 * len(self._alive), first + len(rows), 1024), dtype=bool)
            grown[: len(self._alive)] = self._alive
            self._alive = grown
        for offset, (chunk_id, prefixes, tags) in enumerate(rows):
            self._slot_of[chunk_id] = first + offset
            self._ids.append(chunk_id)
            self._prefixes.append(prefixes)
            self._tags.append(tags)
        self._alive[first : first + len(rows)] = True
        self._live += len(rows)
        return first

    def remove(self, ids: Iterable[str]) -> None:
        for chunk_id in ids:
            slot = self._slot_of.pop(chunk_id, None)
            if slot is not None:
                self._alive[slot] = False
                self._live -= 1

    def _best(
        self,
        candidates: npt.NDArray[np.intp],
        scores: npt.NDArray[np.float32],
        limit: int,
        source_prefixes: Sequence[str],
        tags: Sequence[str],
    ) -> list[tuple[str, float]]:
        """The ``limit`` best of ``candidates`` (alive slots) by ``scores`` that the filter admits, best first."""
        if limit <= 0 or not len(candidates):
            return []
        if not source_prefixes and not tags:
            if len(candidates) > limit:
                candidates = candidates[np.argpartition(-scores[candidates], limit - 1)[:limit]]
            ranked = candidates[np.argsort(-scores[candidates], kind="stable")]
            return [(self._ids[slot], float(scores[slot])) for slot in ranked]
        wanted_prefixes, wanted_tags = set(source_prefixes), set(tags)
        found: list[tuple[str, float]] = []
        for slot in candidates[np.argsort(-scores[candidates], kind="stable")]:
            if wanted_prefixes and wanted_prefixes.isdisjoint(self._prefixes[slot]):
                continue
            if wanted_tags and wanted_tags.isdisjoint(self._tags[slot]):
                continue
            found.append((self._ids[slot], float(scores[slot])))
            if len(found) == limit:
                break
        return found
