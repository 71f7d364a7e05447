"""BPTC vs BP2C: seconds per training step and memory, measured side by side in one run (PICASO fig. 4
right: BP2C trains faster because nothing is back-propagated through the contexts' encoding).

    python bench/finetune_speed.py                  # the bundled demo model, CPU
    python bench/finetune_speed.py --json assets/demo_model_bptc/speed.json   # also for the model card
    python bench/finetune_speed.py --device cuda    # on a GPU (also reports peak CUDA memory)
    python bench/finetune_speed.py --save-examples ex.json   # the retrieved micro-batch, for a machine
    python bench/finetune_speed.py --examples ex.json --device cuda   # without the MiniLM retriever

Each repeat runs one optimizer step of each objective on the SAME micro-batch (held-out demo
retrieval samples with their top-k MiniLM chunks, the fine-tuning shape), alternating the order,
so load from other processes hits both alike; the ratio of medians is the figure to quote. Memory,
three ways:
  saved MiB      bytes autograd keeps for backward (unique storages saved by the forward, via
                 saved_tensors_hooks: what grows with the contexts in BPTC and not in BP2C);
  peak RSS       a FRESH process per objective and k (this file with --child) loads the model and
                 the micro-batch, then runs one optimizer step: its getrusage(RUSAGE_SELF).ru_maxrss
                 (the real peak resident memory, CPU), and 'step' = that peak minus the process's
                 peak before the step (the setup's high-water mark; memory the allocator freed during
                 setup and reuses in the step is not counted, so 'step' is a lower bound);
  peak CUDA      torch.cuda.max_memory_allocated, on a GPU.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import comma_list, interleaved, medians, parse, parser, write_json  # noqa: E402

from picaso_core.light.defaults import count  # noqa: E402

# torch, the model and the fine-tuning code (FT) are imported where they run, after the arguments are
# read (--help and a bad value answer at once, issue 48); so the flags' names:
OBJECTIVES = ("bptc", "bp2c")  # FT.OBJECTIVES (tests/scripts/test_cli_startup.py checks they agree)


def saved_bytes(objective, batch) -> int:
    """Bytes of the unique storages autograd saves during the forward of `batch`."""
    import torch

    seen: dict[int, int] = {}

    def pack(t):
        s = t.untyped_storage()
        seen[s.data_ptr()] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss, _ = objective(batch)
    del loss
    return sum(seen.values())


def one_step(model, objective, opt, batch, device) -> int | None:
    """One optimizer step; on a GPU, the allocator's peak during it."""
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    loss, _ = objective(batch)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return torch.cuda.max_memory_allocated() if device.type == "cuda" else None


def _maxrss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def child(args) -> None:
    """One fresh process, one objective: peak RSS before and after one optimizer step (printed as JSON)."""
    import torch

    from picaso_core.engine.loading import load_model
    from picaso_core.finetune import train as FT

    batch = [tuple(x) for x in json.loads(Path(args.child).read_text())]
    model = load_model(args.model).train()
    objective = FT.CompositionObjective(model, args.objective)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    before = _maxrss_mib()
    one_step(model, objective, opt, batch, torch.device("cpu"))
    print(json.dumps({"before_mib": before, "peak_mib": _maxrss_mib()}))


def peak_rss(args, batch, objective: str) -> dict:
    """Run `child` in a fresh interpreter for `objective` on `batch`; its {before_mib, peak_mib}."""
    import torch

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(batch, f)
    try:
        # Through `sh`, which forks the child itself: Linux carries the forking process's peak RSS across
        # execve into ru_maxrss, so a child forked from this (large) process would report at least ours.
        cmd = ["sh", "-c", '"$@"; exit $?', "sh", sys.executable, __file__, "--child", f.name, "--objective", objective,
               "--model", args.model, "--threads", str(torch.get_num_threads())]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    finally:
        os.unlink(f.name)
    return json.loads(out.strip().splitlines()[-1])


def main(argv=None) -> None:
    ap = parser(__doc__, threads=0, device="cpu", devices=None, repeats=3,
                helps={"json": "also write the table to this JSON file (the model card quotes it)",
                       "device": "cpu | cuda | cuda:N"})
    ap.add_argument("--model", default="demo")
    ap.add_argument("--ks", type=comma_list(count(1)), default="5,10", help="contexts per example")
    ap.add_argument("--batch", type=count(1), default=6, help="composition examples per step")
    ap.add_argument("--save-examples", default=None,
                    help="write the retrieved micro-batch (token ids) to this JSON file and stop")
    ap.add_argument("--examples", default=None,
                    help="read the micro-batch from a --save-examples file instead of retrieving it (no MiniLM needed)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)  # internal: a micro-batch file, see child()
    ap.add_argument("--objective", default=None, choices=OBJECTIVES, help=argparse.SUPPRESS)
    args = parse(ap, argv)
    import torch

    from picaso_core.engine.loading import load_model
    from picaso_core.finetune import train as FT

    if args.child:
        return child(args)
    device = torch.device(args.device)
    cuda, cpu = device.type == "cuda", device.type == "cpu"
    base = load_model(args.model, device=device)
    ks = [int(k) for k in args.ks.split(",")]
    if args.examples:
        examples = [FT.Example(*e) for e in json.loads(Path(args.examples).read_text())]
        if len(examples) < args.batch or min(len(e.contexts) for e in examples) < max(ks):
            raise SystemExit(f"{args.examples} holds {len(examples)} examples with at least "
                             f"{min(len(e.contexts) for e in examples)} contexts; --batch {args.batch} --ks {args.ks} "
                             "need more")
        examples = examples[:args.batch]
    else:
        from picaso_core.data import DEMO_DATA_DIR, load_corpus
        from picaso_core.retrieval.rankers import EmbeddingRanker
        from picaso_core.retrieval.retriever import Retriever, SentenceEmbedder

        corpus = load_corpus("demo", "test")
        retriever = Retriever.cached(corpus.database, SentenceEmbedder(), None,
                                     seeds=[DEMO_DATA_DIR / "test_database.all-MiniLM-L6-v2.safetensors"])
        examples = FT.build_examples(base.tokenizer, corpus.samples[:args.batch], EmbeddingRanker(retriever),
                                     corpus.database, max(ks))
    if args.save_examples:
        Path(args.save_examples).write_text(json.dumps([[e.query, e.continuation, e.contexts] for e in examples]))
        print(f"wrote {len(examples)} examples ({max(ks)} contexts each) to {args.save_examples}")
        return
    load_avg = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{args.model} on {device}, {torch.get_num_threads()} threads, {args.batch} examples per step, "
          f"median of {args.repeats} steps per objective and k (objectives alternate); load average {load_avg} "
          f"on {os.cpu_count()} cores")
    print("| k | context tokens / step | BPTC s / step | BP2C s / step | BPTC / BP2C time | BPTC saved MiB | "
          "BP2C saved MiB | saved ratio |"
          + (" BPTC peak RSS MiB (step) | BP2C peak RSS MiB (step) | peak RSS ratio | step ratio |" if cpu else "")
          + (" BPTC peak CUDA MiB | BP2C peak CUDA MiB |" if cuda else ""))
    print("|---" * (8 + 4 * cpu + 2 * cuda) + "|")
    rows = []
    for k in ks:
        batch = [(e.query, e.continuation, e.contexts[:k][::-1]) for e in examples]
        tokens = sum(len(c) for _, _, ctx in batch for c in ctx)
        runs = {}
        for obj in FT.OBJECTIVES:
            model = copy.deepcopy(base).train()
            runs[obj] = (model, FT.CompositionObjective(model, obj), torch.optim.AdamW(model.parameters(), lr=1e-5))
        step_peaks = {o: [] for o in FT.OBJECTIVES}
        # objectives in alternating order; one warm-up round (allocator, kernels), not timed
        t = medians(interleaved({o: (lambda o=o: step_peaks[o].append(one_step(*runs[o], batch, device) or 0))
                                 for o in FT.OBJECTIVES}, args.repeats, alternate=True))
        peaks = {o: max(v[1:], default=0) for o, v in step_peaks.items()}  # v[0]: the warm-up
        mem = {o: saved_bytes(runs[o][1], batch) / 2**20 for o in FT.OBJECTIVES}
        runs.clear()  # the models and their optimizer states
        out = {"k": k, "tokens": tokens, "s_per_step": t, "saved_mib": mem}
        row = (f"| {k} | {tokens} | {t['bptc']:.3f} | {t['bp2c']:.3f} | {t['bptc'] / t['bp2c']:.2f}x | "
               f"{mem['bptc']:.1f} | {mem['bp2c']:.1f} | {mem['bptc'] / mem['bp2c']:.2f}x |")
        if cpu:  # one fresh process per objective, in alternating order per k
            rss = {o: peak_rss(args, batch, o) for o in (FT.OBJECTIVES if k % 2 else FT.OBJECTIVES[::-1])}
            out["peak_rss_mib"] = p = {o: v["peak_mib"] for o, v in rss.items()}
            out["step_rss_mib"] = d = {o: v["peak_mib"] - v["before_mib"] for o, v in rss.items()}
            row += (f" {p['bptc']:.0f} ({d['bptc']:.0f}) | {p['bp2c']:.0f} ({d['bp2c']:.0f}) | "
                    f"{p['bptc'] / p['bp2c']:.2f}x | {d['bptc'] / max(d['bp2c'], 1e-9):.2f}x |")
        if cuda:
            out["peak_cuda_mib"] = {o: v / 2**20 for o, v in peaks.items()}
            row += f" {peaks['bptc'] / 2**20:.0f} | {peaks['bp2c'] / 2**20:.0f} |"
        rows.append(out)
        print(row, flush=True)
    cmd = "python bench/finetune_speed.py" + "".join(" " + a for a in (sys.argv[1:] if argv is None else argv))
    ratios = {r["k"]: {"time": r["s_per_step"]["bptc"] / r["s_per_step"]["bp2c"],
                       "saved": r["saved_mib"]["bptc"] / r["saved_mib"]["bp2c"]} for r in rows}
    # the card reads command ... rows (finetune/card.py: speed_markdown)
    write_json(args, rows, ratios, command=cmd, device=str(device), threads=torch.get_num_threads(), batch=args.batch,
               repeats=args.repeats, load_avg=load_avg, cpus=os.cpu_count(), date=time.strftime("%Y-%m-%d %H:%M"),
               rows=rows)


if __name__ == "__main__":
    main()
