"""Serving plumbing, and nothing of any tab: the model pool, the bounded queue and its "busy"
refusal, bounded sessions, threads per job, the allocator, background work (serving.py), the
slimmed page config (page_config.py) and the ZeroGPU decorator (gpu.py). docs/serving.md.
"""
