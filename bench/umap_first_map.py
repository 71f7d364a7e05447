"""The first UMAP map in a new process, with and without numba's disk cache for umap-learn
(soup._cache_umap_numba; issue #27: the first switch to UMAP took 37 s).

Fresh Python processes, side by side in one run, on a fresh numba cache folder (NUMBA_CACHE_DIR):
    1. cache on, empty folder    what the very first start of a machine pays (compile, then write)
    2. cache off                 what every server start paid before (compile again)
    3. cache on, folder filled   what every later start pays (load from disk)
Each: seconds to import umap (pynndescent's own cached code) and of the first soup.project(...,
"umap") of 240 x 64 features, as the State soup tab's 240 library states.

    python bench/umap_first_map.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHILD = r"""
import json, sys, time
import numpy as np
t = time.perf_counter()
import umap  # noqa: F401
imp = time.perf_counter() - t
from picaso_core.analysis import soup
if sys.argv[1] == "off":
    soup._UMAP_CACHED = True  # as before: umap's functions stay uncached
x = np.random.default_rng(0).normal(size=(240, 64)).astype(np.float32)
t = time.perf_counter()
soup.project(x, "umap", 2)
first = time.perf_counter() - t
t = time.perf_counter()
soup.project(x, "umap", 3)
print(json.dumps({"import": imp, "first": first, "next": time.perf_counter() - t}))
"""


def run(mode: str, cache: str) -> dict:
    env = {**os.environ, "NUMBA_CACHE_DIR": cache, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", CHILD, mode], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    with tempfile.TemporaryDirectory() as cache:
        rows = [("cache on, empty folder (first start)", run("on", cache)),
                ("cache off (every start, before)", run("off", cache)),
                ("cache on, folder filled (later starts)", run("on", cache))]
    print(f"{'process':42s} {'import umap':>12s} {'first fit':>10s} {'next fit':>9s}")
    for name, r in rows:
        print(f"{name:42s} {r['import']:11.1f}s {r['first']:9.1f}s {r['next']:8.2f}s")
    off, on = rows[1][1], rows[2][1]
    print(f"first UMAP map in a new process: {off['import'] + off['first']:.1f} s -> {on['import'] + on['first']:.1f} s "
          f"({(off['import'] + off['first']) / (on['import'] + on['first']):.1f}x); the fit alone "
          f"{off['first'] / on['first']:.0f}x")


if __name__ == "__main__":
    main()
