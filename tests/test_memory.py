"""picaso_core.light.memory: the caches' sizes a soak reports are measured from their contents."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from picaso_core.light import memory


def test_a_tensor_counts_its_storage_once_however_many_views_hold_it():
    x = torch.zeros(1000, 250)  # 1,000,000 bytes of float32
    alone = memory.deep_bytes(x)
    assert alone == 1_000_000
    assert memory.deep_bytes([x, x[:10], x.view(-1), x.T]) - memory.deep_bytes([None] * 4) == 1_000_000
    assert memory.deep_bytes([x, x.clone()]) - memory.deep_bytes([None, None]) == 2_000_000


def test_arrays_containers_and_dataclasses_are_walked():
    @dataclass
    class Entry:
        state: object
        note: str

    a = np.zeros(50_000, dtype=np.float64)  # 400,000 bytes
    nested = {"runs": [Entry(torch.ones(100_000), "x" * 1000)], "arr": a, "view": a[:10]}
    size = memory.deep_bytes(nested)
    assert 800_000 + 1000 <= size < 800_000 + 1000 + 20_000  # the buffers, the text, a little bookkeeping


def test_report_sizes_what_each_holder_returns_now_and_names_failures():
    box = {"cache": [torch.zeros(1024)]}
    memory.register("test-cache", lambda: box["cache"], "one tensor")
    memory.register("test-broken", lambda: 1 / 0, "none")
    try:
        first = memory.report()["test-cache"]["bytes"]
        box["cache"] = [torch.zeros(4096)]  # the holder is asked at report time
        second = memory.report()
        assert second["test-cache"]["bytes"] - first == 3 * 4096 and second["test-cache"]["bound"] == "one tensor"
        assert second["test-broken"]["bytes"] is None and "ZeroDivisionError" in second["test-broken"]["error"]
    finally:
        memory._REGISTRY.pop("test-cache", None)
        memory._REGISTRY.pop("test-broken", None)
