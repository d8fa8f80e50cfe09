"""Question embeddings for the macro-action controller: encode once, reduce, cache.

:class:`QuestionEmbedder` wraps a sentence encoder (by default the packaged offline MiniLM from
:func:`searchenv.encoders.load_encoder`), encodes each question once (a whole split in one
batched call up front), and reduces the vectors to a few dimensions, either with PCA fitted on
the training questions or with a fixed seeded random projection, standardised with the training
questions' statistics. The fitted reduction is plain arrays, saved with the controller.

:class:`HashingEncoder` is a cheap, deterministic bag-of-words encoder with the same
``encode`` interface, for tests and for machines without torch.
"""

from __future__ import annotations

import hashlib
import os
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agents.baselines.rule_reader import tokenize
from searchenv.encoders import EncoderLike

#: Reduced coordinates are clipped to this many standard deviations.
CLIP = 5.0


#: The encoder interface is searchenv's (:class:`searchenv.encoders.EncoderLike`: ``name``, ``dim`` and
#: ``encode``); the old name is kept.
Encoder = EncoderLike


class HashingEncoder:
    """Signed feature hashing of lower-cased word unigrams and bigrams, L2-normalised.

    Deterministic across processes (CRC32, not Python's salted ``hash``).

    Args:
        dim: Output dimension.
    """

    def __init__(self, dim: int = 256) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 2:
            raise ValueError(f"dim must be an integer >= 2, got {dim!r}")
        self.dim = dim
        self.name = f"hashing-{dim}"

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """Encode texts (``batch_size`` is accepted for interface compatibility).

        Args:
            texts: The texts.
            batch_size: Unused.

        Returns:
            A ``(len(texts), dim)`` float32 array with unit rows (zero rows for empty texts).
        """
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            words = [w.lower() for w in tokenize(text)]
            feats = words + [f"{a} {b}" for a, b in zip(words, words[1:], strict=False)]
            for f in feats:
                h = zlib.crc32(f.encode("utf-8"))
                out[row, h % self.dim] += 1.0 if (h >> 31) & 1 else -1.0
            norm = float(np.linalg.norm(out[row]))
            if norm > 0:
                out[row] /= norm
        return out


def resolve_encoder(encoder: str | Encoder) -> Encoder:
    """Return an encoder from a name (``"minilm"``, ``"hashing"``) or pass an instance through.

    Raises:
        ValueError: For an unknown name.
        TypeError: For an object without ``encode``.
    """
    if isinstance(encoder, str):
        if encoder == "minilm":
            from searchenv.encoders import load_encoder

            loaded: Encoder = load_encoder()
            return loaded
        if encoder == "hashing":
            return HashingEncoder()
        raise ValueError(f"encoder must be 'minilm', 'hashing' or an object with encode(), got {encoder!r}")
    if not callable(getattr(encoder, "encode", None)):
        raise TypeError(f"encoder must have encode(texts, batch_size), got {type(encoder).__name__}")
    return encoder


class QuestionEmbedder:
    """Encode questions once and reduce them to ``dim`` standardised coordinates.

    Args:
        encoder: ``"minilm"`` (the packaged offline all-MiniLM-L6-v2), ``"hashing"`` or an
            :class:`Encoder`. Loaded on first use.
        dim: Reduced dimension (0 keeps no embedding features).
        method: ``"pca"`` (fitted on the training questions) or ``"random"`` (a fixed seeded
            orthonormal projection; only the standardisation is fitted).
        seed: Seed of the random projection.
        batch_size: Encoder batch size.
        cache_dir: If set, raw embeddings of each batch of new questions are also stored on disk
            (``<encoder name>-<hash of the questions>.npy``) and reused by later processes.
    """

    def __init__(
        self,
        encoder: str | Encoder = "minilm",
        *,
        dim: int = 16,
        method: str = "pca",
        seed: int = 0,
        batch_size: int = 64,
        cache_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 0:
            raise ValueError(f"dim must be a non-negative integer, got {dim!r}")
        if method not in ("pca", "random"):
            raise ValueError(f"method must be 'pca' or 'random', got {method!r}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        self._encoder_spec = encoder
        self._encoder: Encoder | None = None if isinstance(encoder, str) else resolve_encoder(encoder)
        self.dim = dim
        self.method = method
        self.seed = seed
        self.batch_size = batch_size
        self.mean: np.ndarray | None = None  # (input_dim,)
        self.components: np.ndarray | None = None  # (dim, input_dim)
        self.scale: np.ndarray | None = None  # (dim,)
        self._raw: dict[str, np.ndarray] = {}
        self._reduced: dict[str, np.ndarray] = {}
        self.encode_calls = 0
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None

    @property
    def fitted(self) -> bool:
        """Whether the reduction has been fitted (or loaded)."""
        return self.components is not None

    @property
    def encoder(self) -> Encoder:
        """The encoder, loaded on first use."""
        if self._encoder is None:
            self._encoder = resolve_encoder(self._encoder_spec)
        return self._encoder

    def precompute(self, questions: Sequence[str]) -> None:
        """Encode every not-yet-seen question in one batched call."""
        todo = list(dict.fromkeys(q for q in questions if q not in self._raw))
        if not todo:
            return
        path = self._cache_path(todo)
        vecs: np.ndarray | None = None
        if path is not None and path.is_file():
            loaded = np.load(path, allow_pickle=False)
            if loaded.ndim == 2 and loaded.shape[0] == len(todo):
                vecs = loaded
        if vecs is None:
            vecs = np.asarray(self.encoder.encode(todo, batch_size=self.batch_size), dtype=np.float32)
            self.encode_calls += 1
            if vecs.ndim != 2 or vecs.shape[0] != len(todo):
                raise ValueError(f"encoder returned shape {vecs.shape} for {len(todo)} texts")
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_name(f"{path.name}.tmp{os.getpid()}.npy")
                np.save(tmp, vecs)
                os.replace(tmp, path)
        for q, v in zip(todo, vecs, strict=True):
            self._raw[q] = v

    def _cache_path(self, questions: Sequence[str]) -> Path | None:
        if self.cache_dir is None:
            return None
        spec = self._encoder_spec
        name = spec if isinstance(spec, str) else str(getattr(spec, "name", type(spec).__name__))
        digest = hashlib.sha256("\n".join([name, *questions]).encode("utf-8")).hexdigest()[:20]
        safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)
        return self.cache_dir / f"{safe}-{digest}.npy"

    def fit(self, questions: Sequence[str]) -> QuestionEmbedder:
        """Fit the reduction on (training) questions.

        Args:
            questions: The questions; at least two distinct ones.

        Returns:
            ``self``.
        """
        uniq = list(dict.fromkeys(questions))
        if len(uniq) < 2:
            raise ValueError(f"fit needs at least 2 distinct questions, got {len(uniq)}")
        self.precompute(uniq)
        x = np.stack([self._raw[q] for q in uniq]).astype(np.float64)
        mean = x.mean(axis=0)
        xc = x - mean
        if self.method == "pca":
            _, _, vt = np.linalg.svd(xc, full_matrices=False)
            comps = np.zeros((self.dim, x.shape[1]))
            k = min(self.dim, vt.shape[0])
            comps[:k] = vt[:k]
        else:
            rng = np.random.default_rng(self.seed)
            g = rng.standard_normal((x.shape[1], max(self.dim, 1)))
            q_mat, _ = np.linalg.qr(g)
            comps = q_mat[:, : self.dim].T
        proj = xc @ comps.T
        std = proj.std(axis=0)
        self.mean = mean.astype(np.float32)
        self.components = comps.astype(np.float32)
        self.scale = np.where(std > 1e-8, 1.0 / np.maximum(std, 1e-8), 0.0).astype(np.float32)
        self._reduced.clear()
        return self

    def __call__(self, question: str) -> np.ndarray:
        """The reduced, standardised embedding of ``question`` (float32, clipped to ``±CLIP``)."""
        if self.mean is None or self.components is None or self.scale is None:
            raise RuntimeError("QuestionEmbedder is not fitted; call fit(train_questions) or load()")
        vec = self._reduced.get(question)
        if vec is None:
            if question not in self._raw:
                self.precompute([question])
            vec = np.clip(((self._raw[question] - self.mean) @ self.components.T) * self.scale, -CLIP, CLIP)
            vec = vec.astype(np.float32)
            self._reduced[question] = vec
        return vec

    def state(self) -> dict[str, Any]:
        """The fitted reduction as arrays (for :meth:`save`)."""
        if self.mean is None or self.components is None or self.scale is None:
            raise RuntimeError("QuestionEmbedder is not fitted")
        return {"mean": self.mean, "components": self.components, "scale": self.scale}

    def save(self, path: str | os.PathLike[str]) -> None:
        """Save the fitted reduction to an ``.npz`` file (no pickles)."""
        np.savez(Path(path), **self.state())

    def load(self, path: str | os.PathLike[str]) -> QuestionEmbedder:
        """Load a reduction saved by :meth:`save`; its dimension must match ``dim``.

        Returns:
            ``self``.
        """
        with np.load(Path(path), allow_pickle=False) as z:
            mean, comps, scale = z["mean"], z["components"], z["scale"]
        if comps.shape[0] != self.dim:
            raise ValueError(f"saved reduction has dim {comps.shape[0]}, this embedder has dim={self.dim}")
        self.mean, self.components, self.scale = mean, comps, scale
        self._reduced.clear()
        return self
