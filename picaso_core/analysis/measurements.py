"""The measurements of figs. 7 and 9 (PICASO appendix B.3): processing n context tokens vs generating
from the resulting state, and the database chunks' lengths. The experiments command
(`python -m picaso_core.experiments`) runs them as its `timing` and `lengths` parts.
"""

from __future__ import annotations

import statistics
import time
from typing import Sequence

import torch

from picaso_core.analysis.summaries import _round, histogram
from picaso_core.analysis.sweep import CONTEXT_SUFFIX


def chunk_lengths(model, texts: Sequence[str], bins: int = 30) -> dict:
    """Fig. 9: histograms of the chunks' lengths in characters and tokens (text + CONTEXT_SUFFIX)."""
    return {"chars": histogram([len(t) for t in texts], bins),
            "tokens": histogram([len(model.tokenizer.encode(t + CONTEXT_SUFFIX)) for t in texts], bins),
            "n_chunks": len(texts)}


def process_vs_generate(model, lengths: Sequence[int], new_tokens: int = 32, repeats: int = 3,
                        text: str = "", seed: int = 0) -> dict:
    """Fig. 7 / appendix B.3: seconds to process n context tokens (one forward from the empty
    state) vs to generate `new_tokens` from the resulting state, median of `repeats`.

    The tokens are `text` tokenised and repeated to length n (random ids when `text` is empty).
    """
    base = model.tokenizer.encode(text) if text else []
    if not base:
        g = torch.Generator().manual_seed(seed)
        base = torch.randint(0, model.config.vocab_size, (max(lengths, default=1),), generator=g).tolist()
    out = {"tokens": [], "process_s": [], "generate_s": [], "new_tokens": new_tokens}
    for n in lengths:
        ids = (base * (n // len(base) + 1))[:n]
        proc, gen = [], []
        for _ in range(repeats):
            t0 = time.perf_counter()
            with torch.no_grad():
                st = model.encode_context(ids)
            proc.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            model.generate(ids[-1:], st, max_new_tokens=new_tokens, temperature=0, stop_at_eos=False)
            gen.append(time.perf_counter() - t0)
        out["tokens"].append(n)
        out["process_s"].append(_round(statistics.median(proc)))
        out["generate_s"].append(_round(statistics.median(gen)))
    return out


