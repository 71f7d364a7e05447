"""The first UMAP map in a new process, with and without numba's disk cache for umap-learn
(soup_projection._cache_umap_numba.

Fresh Python processes, side by side in one run, on a fresh numba cache folder (NUMBA_CACHE_DIR):
    1. cache on, empty folder    what the very first start of a machine pays (compile, then write)
    2. cache off                 what every start pays without the cache (compile again)
    3. cache on, folder filled   what every later start pays (load from disk)
Each: seconds to import umap (pynndescent's own cached code) and of the first soup_projection.project(...,
"umap") of 240 x 64 features, as the State soup tab's 240 library states.

    python bench/umap_first_map.py [--threads N] [--json PATH]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import ROOT, parse, parser, write_json  # noqa: E402

CHILD = r"""
import json, sys, time
import numpy as np
t = time.perf_counter()
import umap  # noqa: F401
imp = time.perf_counter() - t
from picaso_core.analysis import soup_projection
if sys.argv[1] == "off":
    soup_projection._UMAP_CACHED = True  # umap's functions stay uncached
x = np.random.default_rng(0).normal(size=(240, 64)).astype(np.float32)
t = time.perf_counter()
soup_projection.project(x, "umap", 2)
first = time.perf_counter() - t
t = time.perf_counter()
soup_projection.project(x, "umap", 3)
print(json.dumps({"import": imp, "first": first, "next": time.perf_counter() - t}))
"""


def run(mode: str, cache: str, threads: int | None) -> dict:
    env = {**os.environ, "NUMBA_CACHE_DIR": cache, "PYTHONPATH": str(ROOT)}
    if threads:
        env["NUMBA_NUM_THREADS"] = str(threads)
    out = subprocess.run([sys.executable, "-c", CHILD, mode], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    ap = parser(__doc__, helps={"threads": "numba threads of the fresh processes (NUMBA_NUM_THREADS; default: numba's)"})
    args = parse(ap, argv, torch_threads=False)
    with tempfile.TemporaryDirectory() as cache:
        rows = [("cache on, empty folder (first start)", run("on", cache, args.threads)),
                ("cache off (every start compiles)", run("off", cache, args.threads)),
                ("cache on, folder filled (later starts)", run("on", cache, args.threads))]
    print(f"{'process':42s} {'import umap':>12s} {'first fit':>10s} {'next fit':>9s}")
    for name, r in rows:
        print(f"{name:42s} {r['import']:11.1f}s {r['first']:9.1f}s {r['next']:8.2f}s")
    off, on = rows[1][1], rows[2][1]
    print(f"first UMAP map in a new process: {off['import'] + off['first']:.1f} s -> {on['import'] + on['first']:.1f} s "
          f"({(off['import'] + off['first']) / (on['import'] + on['first']):.1f}x); the fit alone "
          f"{off['first'] / on['first']:.0f}x")
    write_json(args, dict(rows), {"first map, cache off / filled": (off["import"] + off["first"]) / (on["import"] + on["first"]),
                                  "first fit, cache off / filled": off["first"] / on["first"]})


if __name__ == "__main__":
    main()
