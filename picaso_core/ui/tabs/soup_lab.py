"""The State soup tab's skill library, one per app (picaso_core.ui.tabs.soup lays the tab out).

The library (12 demonstrations of 16 train items per task and shuffled twin, the paper's
clustering set-up) is encoded on first use into a StateStore under the app's cache folder and
reopened at the next start; its projections are cached. UMAP compiles numba code on its first call
(~40 s on 2 cores, once per machine: soup_projection keeps it in numba's disk cache, ~3 s to load at
later starts): it is warmed in a background thread after the first map is drawn, never at the app's
start, and a first UMAP map asked for before that is done shows its progress (seconds of about the
last measured warm-up).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import OrderedDict
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import numpy as np

from picaso_core.analysis import soup, soup_projection
from picaso_core.session import Resources

SHOTS, PER_TASK, SEED = 16, 12, 0  # paper A.1: 12 16-shot demonstrations per task
WARM_UMAP = os.environ.get("PICASO_WARM_UMAP", "1") != "0"  # tests switch the background compile off
# Seconds the first UMAP warm-up of a machine takes (import and numba compile: 26-37 s measured on 2
# shared cores): the estimate shown while a first UMAP map waits, until a warm-up has been measured.
UMAP_WARM_S = 40.0


def _umap_version() -> str:
    try:
        return version("umap-learn")
    except PackageNotFoundError:
        return "?"


# ---- the lab: the library and caches, one per Resources ----------------------------------------
class Lab:
    """The skill library of one app (built on first use, thread-safe) and cached projections."""

    def __init__(self, res: Resources):
        self.res = res
        self._lib: soup.SkillLibrary | None = None
        self._lock = threading.Lock()
        self._proj: OrderedDict = OrderedDict()
        self._quality: dict | None = None
        self._warm: threading.Thread | None = None
        self._warm_t0 = 0.0
        self._umap_ready = False

    @property
    def folder(self) -> Path:
        return soup.SkillLibrary.default_folder(Path(self.res.cache_dir), self.res.model, None,
                                                SHOTS, PER_TASK, SEED)

    def library(self, progress=None) -> soup.SkillLibrary:
        with self._lock:
            if self._lib is None:
                self._lib = soup.SkillLibrary.build(self.res.model, None, SHOTS, PER_TASK, SEED, store=self.folder,
                                                    progress=progress)
            return self._lib

    def quality(self) -> dict:
        lib = self.library()
        with self._lock:
            if self._quality is None:
                self._quality = soup.cluster_quality(lib)
            return self._quality

    def projection(self, layer: int, part: str, method: str, dim: int, extra: np.ndarray | None = None) -> np.ndarray:
        """The library's unit features (and `extra` rows, a typed demonstration) projected; the
        library-only maps are cached (a typed demonstration changes t-SNE / UMAP maps: not cached)."""
        lib = self.library()
        x = lib.unit_features(layer, part)
        if extra is not None:
            return soup_projection.project(np.concatenate([x, extra]), method, dim, seed=SEED)
        key = (layer, part, method, dim)
        with self._lock:
            if key in self._proj:
                self._proj.move_to_end(key)
                return self._proj[key]
        z = soup_projection.project(x, method, dim, seed=SEED)
        with self._lock:
            self._proj[key] = z
            while len(self._proj) > 48:
                self._proj.popitem(last=False)
        return z

    @property
    def warm_file(self) -> Path:
        """Seconds the last UMAP warm-up took on this machine: the estimate shown while the next waits."""
        return Path(self.res.cache_dir) / "umap-warm-up.json"

    def umap_estimate(self) -> tuple[float, bool]:
        """(seconds the warm-up should take, measured before?): the last measured warm-up of this
        umap-learn version (numba's disk cache makes later starts ~3 s), else UMAP_WARM_S."""
        try:
            d = json.loads(self.warm_file.read_text())
            if d["umap"] == _umap_version():
                return max(1.0, float(d["seconds"])), True
        except (OSError, ValueError, KeyError, TypeError):
            pass
        return UMAP_WARM_S, False

    def _warm_up(self) -> None:
        t0 = time.monotonic()
        soup_projection.warm_up_umap()
        try:
            self.warm_file.parent.mkdir(parents=True, exist_ok=True)
            self.warm_file.write_text(json.dumps({"seconds": round(time.monotonic() - t0, 1), "umap": _umap_version()}))
        except OSError:  # a read-only cache folder: the estimate stays the default
            pass

    def warm_umap(self) -> None:
        """Compile UMAP in the background once (it holds no lock the handlers need)."""
        if WARM_UMAP and self._warm is None:
            self._warm = threading.Thread(target=self._warm_up, name="umap-warm-up", daemon=True)
            self._warm_t0 = time.monotonic()
            self._warm.start()

    def wait_for_umap(self, progress) -> None:
        """Before the first UMAP map: wait for the compile with honest progress (seconds so far of
        about UMAP_WARM_S); a UMAP call made meanwhile would wait on the same compile, silently."""
        if self._umap_ready:
            return
        est, measured = self.umap_estimate()
        what = ("loading UMAP's compiled numba code from disk (once per server start)" if measured else
                "compiling UMAP's numba code (once per machine: later starts load it from disk)")
        self.warm_umap()
        while self._warm is not None and self._warm.is_alive():
            spent = time.monotonic() - self._warm_t0
            progress(min(0.95, spent / est), desc=f"{what}: {spent:.0f} s of about {est:.0f} s")
            self._warm.join(0.5)
        self._umap_ready = True


def lab_for(res: Resources) -> Lab:
    return res.derived("soup_lab", lambda: Lab(res))
