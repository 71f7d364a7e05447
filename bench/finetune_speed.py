"""BPTC vs BP2C: seconds per training step and memory, measured side by side in one run (PICASO fig. 4
right: BP2C trains faster because nothing is back-propagated through the contexts' encoding).

    python bench/finetune_speed.py                  # the bundled demo model, CPU
    python bench/finetune_speed.py --device cuda    # on a GPU (also reports peak CUDA memory)

Each repeat runs one optimizer step of each objective on the SAME micro-batch (held-out demo
retrieval samples with their top-k MiniLM chunks, the fine-tuning shape), alternating the order,
so load from other processes hits both alike; the ratio of medians is the figure to quote. Memory
is the bytes autograd keeps for backward (unique storages saved by the forward, via
saved_tensors_hooks: what grows with the contexts in BPTC and not in BP2C), plus
torch.cuda.max_memory_allocated on a GPU.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from picaso_core import finetune as FT  # noqa: E402
from picaso_core.loading import load_model  # noqa: E402


def saved_bytes(objective, batch) -> int:
    """Bytes of the unique storages autograd saves during the forward of `batch`."""
    seen: dict[int, int] = {}

    def pack(t):
        s = t.untyped_storage()
        seen[s.data_ptr()] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss, _ = objective(batch)
    del loss
    return sum(seen.values())


def one_step(model, objective, opt, batch, device) -> tuple[float, int | None]:
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    loss, _ = objective(batch)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if device.type == "cuda":
        torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() if device.type == "cuda" else None
    return time.perf_counter() - t0, peak


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="demo")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--ks", default="5,10", help="contexts per example")
    ap.add_argument("--batch", type=int, default=6, help="composition examples per step")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from picaso_core.data import DEMO_DATA_DIR, load_corpus
    from picaso_core.rankers import EmbeddingRanker
    from picaso_core.retrieval import Retriever, SentenceEmbedder

    device = torch.device(args.device)
    base = load_model(args.model, device=device)
    corpus = load_corpus("demo", "test")
    retriever = Retriever.cached(corpus.database, SentenceEmbedder(), None,
                                 seeds=[DEMO_DATA_DIR / "test_database.all-MiniLM-L6-v2.safetensors"])
    ks = [int(k) for k in args.ks.split(",")]
    examples = FT.build_examples(base.tokenizer, corpus.samples[:args.batch], EmbeddingRanker(retriever), corpus.database,
                                 max(ks))
    print(f"{args.model} on {device}, {torch.get_num_threads()} threads, {args.batch} examples per step, "
          f"median of {args.repeats} steps per objective and k (objectives alternate)")
    print("| k | context tokens / step | BPTC s / step | BP2C s / step | BPTC / BP2C time | BPTC saved MiB | "
          "BP2C saved MiB | memory ratio |" + (" BPTC peak CUDA MiB | BP2C peak CUDA MiB |" if device.type == "cuda" else ""))
    print("|---" * (8 + (2 if device.type == "cuda" else 0)) + "|")
    for k in ks:
        batch = [(e.query, e.continuation, e.contexts[:k][::-1]) for e in examples]
        tokens = sum(len(c) for _, _, ctx in batch for c in ctx)
        runs = {}
        for obj in FT.OBJECTIVES:
            model = copy.deepcopy(base).train()
            runs[obj] = (model, FT.CompositionObjective(model, obj), torch.optim.AdamW(model.parameters(), lr=1e-5))
        times = {o: [] for o in FT.OBJECTIVES}
        peaks = {o: 0 for o in FT.OBJECTIVES}
        for r in range(args.repeats + 1):  # the first round warms up (allocator, kernels) and is dropped
            for obj in (FT.OBJECTIVES if r % 2 == 0 else FT.OBJECTIVES[::-1]):
                model, objective, opt = runs[obj]
                s, peak = one_step(model, objective, opt, batch, device)
                if r:
                    times[obj].append(s)
                    peaks[obj] = max(peaks[obj], peak or 0)
        mem = {o: saved_bytes(runs[o][1], batch) for o in FT.OBJECTIVES}
        t = {o: statistics.median(v) for o, v in times.items()}
        row = (f"| {k} | {tokens} | {t['bptc']:.3f} | {t['bp2c']:.3f} | {t['bptc'] / t['bp2c']:.2f}x | "
               f"{mem['bptc'] / 2**20:.1f} | {mem['bp2c'] / 2**20:.1f} | {mem['bptc'] / mem['bp2c']:.2f}x |")
        if device.type == "cuda":
            row += f" {peaks['bptc'] / 2**20:.0f} | {peaks['bp2c'] / 2**20:.0f} |"
        print(row, flush=True)


if __name__ == "__main__":
    main()
