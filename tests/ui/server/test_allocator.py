"""serving.tune_allocator: a request's freed buffers go back to the OS at once, whatever was freed
before them. glibc raises its mmap threshold to the largest block freed so far (up to 32 MiB), so
after one big tensor every later 1 MiB buffer lands in the arenas, and a long-lived allocation made
in between pins the freed pages there: the mixed soak's resident memory kept climbing that way
(docs/serving.md, 'Memory'). Each case runs in a fresh interpreter, whose malloc has seen nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

# one "burst": a 16 MiB block freed (the threshold rises to it), then 64 buffers of 1 MiB, written
# (resident), each followed by a small allocation that outlives the request (a cache entry), then the
# buffers freed. Prints the resident MB the burst left behind, with no malloc_trim.
BURST = r"""
import ctypes, json, sys
from picaso_core.light import memory
from picaso_core.ui.server import serving
if sys.argv[1] == "tuned":
    serving.tune_allocator()
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
def rss():
    return next(int(x.split()[1]) / 1024 for x in open("/proc/self/status") if x.startswith("VmRSS:"))
big = libc.malloc(16 << 20); libc.memset(big, 1, 16 << 20); libc.free(big)
before, heap0 = rss(), memory.heap()
bufs, kept = [], []
for _ in range(64):
    b = libc.malloc(1 << 20); libc.memset(b, 1, 1 << 20); bufs.append(b)
    kept.append(libc.malloc(256))
heap1 = memory.heap()
for b in bufs:
    libc.free(b)
print(json.dumps({"left_mb": rss() - before, "mmapped_mb": heap1["mmapped"] - heap0["mmapped"]}))
"""


def burst(mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", BURST, mode], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc and /proc")
def test_a_bursts_freed_buffers_are_handed_back_after_a_big_one_was_freed():
    tuned = burst("tuned")
    assert tuned["mmapped_mb"] >= 60, tuned  # each 1 MiB buffer mapped on its own ...
    assert tuned["left_mb"] < 16, tuned  # ... and unmapped when freed: the burst leaves nothing resident
