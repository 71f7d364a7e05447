"""UMAP fits run one at a time: the State soup tab warms UMAP's numba code in a background
thread, and a user's first UMAP map started while that compile runs raises IndexError in fresh
containers. soup_projection.project serialises the fits, so the user's map waits for the warm-up instead."""

from __future__ import annotations

import sys
import threading
import time
import types

import numpy as np

from picaso_core.analysis import soup_projection


def test_umap_fits_never_overlap(monkeypatch):
    active, peak, lock = [0], [0], threading.Lock()

    class SlowUMAP:  # stands in for umap.UMAP: records how many fits run at once
        def __init__(self, n_components, **kwargs):
            self.dim = n_components

        def fit_transform(self, z):
            with lock:
                active[0] += 1
                peak[0] = max(peak[0], active[0])
            time.sleep(0.2)
            with lock:
                active[0] -= 1
            return np.zeros((len(z), self.dim))

    monkeypatch.setitem(sys.modules, "umap", types.SimpleNamespace(UMAP=SlowUMAP))
    warm = threading.Thread(target=soup_projection.warm_up_umap)
    warm.start()
    time.sleep(0.05)  # the warm-up's fit is running
    x = np.random.default_rng(0).normal(size=(20, 6)).astype(np.float32)
    assert soup_projection.project(x, "umap", 2).shape == (20, 2)
    warm.join()
    assert peak[0] == 1
