"""Maps of the skill library (State Soup fig. 1 left, fig. 4, 5): features [n, D] projected to 2-D
or 3-D by PCA, t-SNE or UMAP, deterministic per seed. Plain numpy in and out; the features come
from picaso_core.analysis.soup (SkillLibrary.unit_features, features).
"""

from __future__ import annotations

import threading

import numpy as np
import torch

PROJECTIONS = ("pca", "tsne", "umap")
_UMAP_LOCK = threading.Lock()  # see project()
_UMAP_CACHED = False  # see _cache_umap_numba()
PCA_DIMS = 50  # PCA to this many dimensions before t-SNE / UMAP, as the Embedding Projector does


def pca(x: np.ndarray, dim: int) -> np.ndarray:
    """Centred PCA scores [n, dim] through the n x n Gram matrix (n states << D features: an
    eigendecomposition of n x n instead of an SVD of n x D). Each axis's sign is fixed so that its
    largest-magnitude score is positive: the same map on every run."""
    x = torch.from_numpy(np.asarray(x, dtype=np.float32))
    x = x - x.mean(0)
    # The n x n Gram matrix in float32 (the costly product: n^2 D), its eigendecomposition in float64.
    gram = (x @ x.T).double()  # [n, n]
    vals, vecs = torch.linalg.eigh(gram)  # ascending
    dim = min(dim, x.shape[0])
    vals, vecs = vals.flip(0)[:dim], vecs.flip(1)[:, :dim]
    scores = vecs * vals.clamp(min=0).sqrt()  # U S: the projections on the principal axes
    sign = torch.sign(scores.gather(0, scores.abs().argmax(0, keepdim=True)))
    scores = scores * torch.where(sign == 0, torch.ones_like(sign), sign)
    out = scores.numpy()
    if out.shape[1] < dim:
        out = np.pad(out, ((0, 0), (0, dim - out.shape[1])))
    return out


def project(x: np.ndarray, method: str = "pca", dim: int = 2, seed: int = 0) -> np.ndarray:
    """Project features [n, D] to [n, dim]; deterministic per seed.

    pca: exact PCA. tsne (scikit-learn) and umap (umap-learn, cosine metric): after PCA to
    PCA_DIMS dimensions, as the Embedding Projector does (fast, and the noise dimensions go).
    """
    if method not in PROJECTIONS:
        raise ValueError(f"method must be one of {PROJECTIONS}, got {method!r}")
    if dim not in (2, 3):
        raise ValueError(f"dim must be 2 or 3, got {dim!r}")
    x = np.asarray(x, dtype=np.float32)
    n = x.shape[0]
    if n < 4:
        raise ValueError(f"need at least 4 states to project, got {n}")
    if method == "pca":
        return pca(x, dim).astype(np.float32)
    z = pca(x, min(PCA_DIMS, n - 1)).astype(np.float32)
    if method == "tsne":
        from sklearn.manifold import TSNE  # heavy, on first use: t-SNE maps only

        # 500 iterations (scikit-learn's default is 1000): the clusters are settled by then, and ~500
        # states take ~4 s instead of ~9 s on a shared 2-core machine.
        return TSNE(n_components=dim, perplexity=float(min(30.0, (n - 1) / 3)), init="pca", random_state=seed,
                    max_iter=500).fit_transform(z).astype(np.float32)
    import umap  # heavy, on first use: UMAP maps only (numba compiles then: the app warms it in a background thread)

    # One UMAP fit at a time: a fit that starts while another thread's first fit is still compiling
    # numba code (the app's warm-up) raises IndexError in fresh containers. A user's first UMAP map
    # therefore waits for the warm-up instead of racing it; warm fits take ~1.6 s.
    with _UMAP_LOCK:
        _cache_umap_numba()
        return umap.UMAP(n_components=dim, n_neighbors=min(15, n - 1), metric="cosine", random_state=seed,
                         n_jobs=1).fit_transform(z).astype(np.float32)


def _cache_umap_numba() -> None:
    """Keep UMAP's compiled numba code on disk (numba's cache: __pycache__ beside umap-learn, or the
    user's cache folder where that is read-only). umap-learn compiles its functions without
    cache=True, so every new process would pay the compile again: 11-16 s of a first fit of 240 states on
    2 shared cores, 0.3 s once loaded from disk (bench/umap_first_map.py). Run before the first fit
    compiles them (under _UMAP_LOCK)."""
    global _UMAP_CACHED
    if _UMAP_CACHED:
        return
    try:  # umap-learn's numba internals, on the first UMAP fit only
        from numba.core.caching import NullCache
        from numba.core.registry import CPUDispatcher
        from umap import distances, layouts, spectral, umap_, utils
    except ImportError:  # a stand-in umap (tests) or another numba: fits still work, uncached
        return
    _UMAP_CACHED = True
    for module in (umap_, layouts, utils, distances, spectral):
        for f in vars(module).values():
            if isinstance(f, CPUDispatcher) and isinstance(f._cache, NullCache):
                f.enable_caching()


def warm_up_umap() -> None:
    """Compile UMAP's numba code once (tens of seconds on a cold machine; cached on disk after)."""
    x = np.random.default_rng(0).normal(size=(40, 8)).astype(np.float32)
    project(x, "umap", 2)
