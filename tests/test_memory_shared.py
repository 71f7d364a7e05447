"""picaso_core.light.memory.not_a_cache: a cache that keeps a reference to what every tab shares (a lab
keeps the Resources it was made from: the model, the retriever's encoder) is charged only for what it
holds itself. The mixed soak's "derived per app" figure was 445.7 MB partly because each cache in it
counted the loaded model and the retriever (~100 MB) again (docs/serving.md, 'Memory')."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from picaso_core.light import memory


@dataclass
class Shared:  # stands in for Resources: the model's weights, not a cache
    weights: torch.Tensor


class Lab:  # a cache that keeps the shared object beside its own contents
    def __init__(self, shared: Shared):
        self.shared = shared
        self.features = torch.zeros(250_000)  # 1,000,000 bytes of its own


def test_a_cache_is_not_charged_for_the_shared_objects_it_refers_to():
    shared = Shared(torch.zeros(2_500_000))  # 10,000,000 bytes
    labs = {"soup": Lab(shared)}
    memory.register("test-lab", lambda: labs, "one lab")
    memory.register("test-weights-as-a-cache", lambda: shared.weights, "none")
    try:
        before = memory.report()["test-lab"]["bytes"]
        assert before > 11_000_000  # nothing excluded yet: the weights are counted in the lab
        memory.not_a_cache("test-shared", lambda: [shared])
        after = memory.report()
        assert 1_000_000 <= after["test-lab"]["bytes"] < 1_050_000, after["test-lab"]
        # only the objects named are skipped: the tensor registered on its own is still measured
        assert after["test-weights-as-a-cache"]["bytes"] == 10_000_000
    finally:
        memory._REGISTRY.pop("test-lab", None)
        memory._REGISTRY.pop("test-weights-as-a-cache", None)
        memory._ELSEWHERE.pop("test-shared", None)
