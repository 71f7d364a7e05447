"""The paper's experiments over a corpus, in one command (PICASO sec. 6.1-6.3, figs. 3, 5-9, table 1).

    python -m picaso_core.experiments --model demo --corpus demo --samples 200 --ks 0-10 --out runs/demo

Protocol (sec. 6.1). For each query the contexts are the top-k chunks of a retriever, presented most
relevant LAST (Concat's best-case order, sec. 6.2):
    retrieval samples (WikiText, the demo's retrieval set): top-k of the whole chunk database, the
        sample's own chunks (`exclude_ids`: its two halves) never returned;
    QA samples (MS MARCO, the demo's QA set): the sample's own passages, ranked by the retriever.
Every method of picaso_core.analysis.evaluate runs on every (sample, k); k = 0 is the baseline for all.

Parts of a run (each can be turned off; all write to one records.jsonl):
    main        k-sweep (`--ks`, fig. 3 left; timings: fig. 3 right, fig. 5), all-MiniLM-L6-v2
    qa          the QA set with all its passages (table 1 row 1); demo: the demo's QA samples
    long        k up to 50 without PICConcat-R (fig. 6: Concat past the training length)
    retrievers  PICASO-R and the baseline per retriever (fig. 8): MiniLM, BM25 (rank-bm25), random
                offline; all-mpnet-base-v2 and GloVe averages (sentence-transformers) when online
    timing      processing n tokens vs generating 32 tokens from the state, n up to 8k (fig. 7)
    lengths     chunk lengths in tokens and characters (fig. 9)

Records are keyed by (retriever, sample_id, k, method) and appended as each (sample, k) finishes:
an interrupted run resumes where it stopped, and a part that needs a record another part already
made (the QA pass at k = all passages, the MiniLM curve of the ablation) reuses it. Outputs in
--out: records.jsonl, summary.json, report.html (self-contained, opens offline), paper_vs_ours.md.

This module is the command: its parts and the CLI; it stands above the analyses and the figures (it
writes the report through picaso_core.plots). The measurements of figs. 7 and 9 are in
picaso_core/analysis/measurements.py, the record log and the k-sweep in picaso_core/analysis/sweep.py, the rankers in picaso_core/retrieval/rankers.py, and
what is made from the records (curves, gains, paper vs ours, the report) in
picaso_core/analysis/summaries.py.
"""

from __future__ import annotations

import argparse
import errno
import functools
import hashlib
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Sequence

# torch and the engine are imported inside the functions that run the protocol (evaluate imports
# compose on first use), so that `--help` and a bad flag answer at once.
from picaso_core.analysis.evaluate import METHODS
from picaso_core.analysis.summaries import paper_vs_ours, summarize
from picaso_core.analysis.sweep import CONTEXT_SUFFIX, ContextSource, RecordLog, parse_ks, run_sweep
from picaso_core.light.defaults import count
from picaso_core.retrieval.rankers import RETRIEVERS, make_ranker

__all__ = ["main", "parse_args", "cache_root", "default_store_dir"]

LONG_METHODS = ("none", "concat", "soup", "caso", "picaso_s", "picaso_r")  # fig. 6: no PICConcat-R (n² tokens)
ABLATION_METHODS = ("none", "picaso_r")  # fig. 8 ablates PICASO-R


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------
def cache_root() -> Path:
    """The CLI's cache folder: its default stores, and what it derives from a store given with --store."""
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "picaso_explorer" / "experiments"


def default_store_dir(corpus: str, split: str, fingerprint: str, database: str | None = None) -> Path:
    base = cache_root()
    name = Path(corpus).stem if corpus.endswith(".jsonl") else corpus
    if database:  # another database file, another store (a chunk id may carry another text there)
        name += f"+{Path(database).stem}-{hashlib.sha256(str(Path(database).resolve()).encode()).hexdigest()[:8]}"
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{name}-{split}")
    return base / f"{slug}-{fingerprint}"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m picaso_core.experiments", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="demo", help="'demo', a checkpoint folder, or a hub id")
    p.add_argument("--corpus", default="demo", help="demo | wikitext | msmarco | a .jsonl file")
    p.add_argument("--database", default=os.environ.get("PICASO_DATABASE") or None, metavar="FILE",
                   help="a database file ({\"id\", \"text\"} per line) whose chunks join a .jsonl corpus's: the "
                   "chunks retrieval samples retrieve from [PICASO_DATABASE]")
    p.add_argument("--split", default="test")
    p.add_argument("--samples", type=count(0), default=200, help="samples of the main sweep and the QA pass")
    p.add_argument("--ks", type=_ks_list(empty=False), default="0-10",
                   help="k values of the main sweep: 0-10, or a list such as 0,2,5")
    p.add_argument("--methods", type=_methods, default=",".join(METHODS), help=f"subset of {','.join(METHODS)}")
    p.add_argument("--out", default="runs/demo", help="output folder (a rerun resumes what is in it)")
    p.add_argument("--qa", default="auto", help="QA pass (table 1): auto (demo: the demo's QA set; msmarco: "
                   "itself), none, or a corpus name")
    p.add_argument("--timed-samples", type=int, default=20,
                   help="the first N samples build every state on its own and time it (fig. 3 right, fig. 5); "
                   "the rest build Concat and PICConcat-R for all k from shared prefixes (the same states, about "
                   "half the work) and record no compose time for them; -1: time every sample")
    p.add_argument("--long-ks", type=_ks_list(), default="20,30,40,50",
                   help="fig. 6 sweep beyond 10 chunks ('none' to skip)")
    p.add_argument("--long-samples", type=count(0), default=20)
    p.add_argument("--retrievers", type=_retrievers, default="minilm,bm25,random,mpnet,glove",
                   help="fig. 8 ablation (mpnet and glove need the hub; skipped offline); 'none' to skip")
    p.add_argument("--ablation-samples", type=count(0), default=50)
    p.add_argument("--timing-tokens", type=_ks_list(), default="256,512,1024,2048,4096,8192",
                   help="fig. 7: context lengths for processing vs generating 32 tokens ('none' to skip)")
    p.add_argument("--store", default=os.environ.get("PICASO_STORE") or None,
                   help="state store: a folder, or the URL of a prebuilt one (python -m picaso_core.store build; "
                   "read-only) [PICASO_STORE] (default: ~/.cache/picaso_explorer/experiments/...)")
    p.add_argument("--threads", type=count(0), default=None, help="torch CPU threads (default: torch's)")
    p.add_argument("--device", default=None)
    p.add_argument("--ship", default=None, help="also write summary.json here (the app's Benchmarks tab reads "
                   "assets/benchmarks_summary.json)")
    return p.parse_args(argv)


# argparse `type=` checks: a bad value is argparse's one `error:` line at once, not a traceback after
# the model loads. The lists stay as written (the report names them); _run parses them.
def _ks_list(empty: bool = True):
    def check(text: str) -> str:
        try:
            ks = parse_ks(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        if not ks and not empty:
            raise argparse.ArgumentTypeError(f"{text!r} names no k: the main sweep needs at least one (e.g. 0-10)")
        return text
    return check


def _names(text: str, valid, what: str) -> str:
    bad = [n.strip() for n in text.split(",") if n.strip() and n.strip() not in (*valid, "none")]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown {what} {', '.join(map(repr, bad))} (valid: {', '.join(valid)})")
    return text


def _methods(text: str) -> str:
    if not [m for m in text.split(",") if m.strip()]:
        raise argparse.ArgumentTypeError(f"no methods given (valid: {', '.join(METHODS)})")
    return _names(text, METHODS, "methods")


def _retrievers(text: str) -> str:
    return _names(text, tuple(RETRIEVERS), "retrievers")




def main(argv: Sequence[str] | None = None, embedder=None) -> dict:
    """Run the CLI; returns the summary. `embedder`: the MiniLM stand-in (tests pass a tiny one).
    A store that cannot serve the run (missing, partial at a URL, another model's, a corrupt shard)
    exits with one line naming the fix, not a traceback."""
    args = parse_args(argv)
    # after the arguments, as in _run: --help answers without torch (the store imports it)
    from picaso_core.data import CorpusError, HubError
    from picaso_core.store.store import StoreError

    try:
        return _run(args, argv, embedder)
    except (StoreError, CorpusError, HubError) as e:  # known faults: one line naming the fix, no traceback
        sys.exit(f"error: {e}")
    except OSError as e:
        if e.errno not in (errno.EACCES, errno.EROFS, errno.EPERM, errno.ENOSPC) or not e.filename:
            raise  # a bug: its traceback
        sys.exit(f"error: cannot write {e.filename} ({e.strerror}); pass an --out (and a store) this account can "
                 "write, with room to spare")


def _run(args: argparse.Namespace, argv: Sequence[str] | None, embedder) -> dict:
    # the run's heavy imports, after the arguments: --help answers at once, without torch
    import torch

    from picaso_core.analysis.measurements import chunk_lengths, process_vs_generate
    from picaso_core.data import DEMO_DATA_DIR, load_corpus
    from picaso_core.engine.loading import load_model
    from picaso_core.retrieval.retriever import Retriever, SentenceEmbedder, embeddings_path
    from picaso_core.store.store import (StateStore, StoreError, check_serves, derived_folder, heal, is_url, missing_index,
                                         tqdm_progress)

    progress_bar = functools.partial(tqdm_progress, unit="step")

    # the command that builds (or completes) the store this run reads
    build_cmd = (f"python -m picaso_core.store build --model {args.model} --corpus {args.corpus} "
                 f"--split {args.split} --out {args.store}")
    if args.store and not is_url(args.store) and not (Path(args.store) / "store.json").exists():
        # a typo must not start a new, empty store (the app refuses one too)
        raise StoreError(missing_index(Path(args.store), args.store, build_cmd) + ", or leave out --store "
                         "(and PICASO_STORE) to encode into the default cache as the run goes")
    if args.threads:
        torch.set_num_threads(args.threads)
    t_start = time.perf_counter()
    ks = parse_ks(args.ks)
    methods = tuple(m.strip() for m in args.methods.split(",") if m.strip())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = RecordLog(out / "records.jsonl")
    print(f"{len(log)} records already in {out / 'records.jsonl'}" if len(log) else f"writing to {out}")

    model = load_model(args.model, device=args.device)
    model.name_or_path = args.model
    # records are keyed without the model: a folder holds one model's run on one corpus split
    ident = {"fingerprint": model.fingerprint(), "corpus": args.corpus, "split": args.split}
    if args.database:
        ident["database"] = str(Path(args.database).resolve())
    run_file = out / "run.json"
    if run_file.is_file() and json.loads(run_file.read_text()) != ident:
        sys.exit(f"error: {out} holds a run of {json.loads(run_file.read_text())}, not {ident}; "
                 "pass another --out (or delete the folder) so its records are not reused")
    run_file.write_text(json.dumps(ident))
    corpus = load_corpus(args.corpus, args.split, database=args.database)
    if not corpus.samples:
        sys.exit(f"error: corpus {args.corpus} has no samples: the protocol scores samples' continuations")
    qa_name = args.qa
    if qa_name == "auto":
        qa_name = "demo" if args.corpus == "demo" else ("msmarco" if args.corpus == "msmarco" else "none")
    qa_corpus = None
    if qa_name != "none":
        qa_corpus = corpus if qa_name == args.corpus and corpus.samples and corpus.samples[0].kind == "qa" \
            else load_corpus(qa_name, args.split, kind="qa")
    database = dict(corpus.database)
    if qa_corpus is not None:
        database.update(qa_corpus.database)

    store_dir = args.store or default_store_dir(args.corpus, args.split, model.fingerprint(), args.database)
    store = StateStore.open(store_dir, model, build_cmd=build_cmd) if is_url(store_dir) or \
        (Path(store_dir) / "store.json").exists() else StateStore.build(model, [], store_dir, suffix=CONTEXT_SUFFIX,
                                                                        progress=False)
    # the app's check, before any sweep: a URL store (read-only) must hold every context retrieved from
    check_serves(store, database, CONTEXT_SUFFIX, build_cmd)
    heal(store, print, verify=True)  # a batch run: a second to hash the shards, then no surprise mid-sweep
    # embeddings and ranker caches: never into or beside a store given with --store (it may be read-only)
    store_dir = derived_folder(cache_root(), store)
    source = ContextSource.from_store(store, database, progress=progress_bar("encoding contexts (database build)"))

    embedder = embedder or SentenceEmbedder()
    seeds = []
    if args.corpus == "demo" or qa_name == "demo":
        seeds = [DEMO_DATA_DIR / f"{args.split}_database.{embedder.name}.safetensors"]
    minilm = Retriever.cached(database, embedder, embeddings_path(store_dir, embedder.name), seeds=seeds,
                              progress=progress_bar("embedding chunks for retrieval"))
    rankers = {"minilm": make_ranker("minilm", database, minilm)}

    samples = corpus.samples[: args.samples]
    timed = None if args.timed_samples < 0 else args.timed_samples
    plan: dict = {"main": {"samples": [s.sample_id for s in samples], "ks": ks}}
    print(f"main k-sweep: {len(samples)} samples x k = {args.ks} x {len(methods)} methods")
    run_sweep(model, samples, rankers["minilm"], source, ks, log, methods, "main", progress_bar("main k-sweep"),
              timed=timed)

    if qa_corpus is not None:
        qa_samples = qa_corpus.samples[: args.samples]
        print(f"QA pass (table 1): {len(qa_samples)} {qa_corpus.name} questions with all their passages")
        run_sweep(model, qa_samples, rankers["minilm"], source, [None], log, methods, "qa", progress_bar("QA pass"),
                  timed=timed)
        plan["qa"] = {"corpus": f"{qa_corpus.name} QA" if qa_corpus.name == "demo" else qa_corpus.name,
                      "keys": [[s.sample_id, len(s.contexts)] for s in qa_samples]}

    long_ks = parse_ks(args.long_ks)
    retrieval_kind = bool(samples) and samples[0].kind == "retrieval"
    if long_ks and retrieval_kind:
        long_samples = samples[: args.long_samples]
        long_methods = tuple(m for m in methods if m in LONG_METHODS)
        print(f"long sweep (fig. 6): {len(long_samples)} samples x k = {args.long_ks}, no PICConcat-R")
        run_sweep(model, long_samples, rankers["minilm"], source, long_ks, log, long_methods, "long",
                  progress_bar("long sweep"))
        plan["long"] = {"samples": [s.sample_id for s in long_samples], "ks": sorted(set(long_ks) | set(ks))}

    skipped = []
    names = [n.strip() for n in args.retrievers.split(",") if n.strip() and n.strip() != "none"]
    if names:
        abl = samples[: args.ablation_samples]
        done = []
        for name in names:
            try:
                ranker = rankers.get(name) or make_ranker(name, database, cache_dir=store_dir)
            except RuntimeError as e:
                print(e)
                skipped.append(str(e))
                continue
            print(f"retriever ablation (fig. 8): {RETRIEVERS[name][0]}, {len(abl)} samples")
            run_sweep(model, abl, ranker, source, ks, log, ABLATION_METHODS, "retrievers", progress_bar(f"retriever {name}"))
            done.append(name)
        plan["retrievers"] = {"samples": [s.sample_id for s in abl], "ks": ks, "names": done}

    timing = None
    timing_tokens = parse_ks(args.timing_tokens)
    if timing_tokens:
        tpath = out / "timing.json"
        want = {"tokens": timing_tokens, "fingerprint": model.fingerprint()}
        old = json.loads(tpath.read_text()) if tpath.is_file() else {}
        if {k: old.get(k) for k in want} == want:
            timing = old
        else:
            print(f"fig. 7: processing vs generating 32 tokens at {timing_tokens} tokens")
            timing = {**process_vs_generate(model, timing_tokens, text=" ".join(list(database.values())[:200])),
                      **want}
            tpath.write_text(json.dumps(timing))

    texts = [database[c] for c in (corpus.database if retrieval_kind else database)]
    extra = {
        "meta": {"model": args.model, "fingerprint": model.fingerprint(), "corpus": args.corpus, "split": args.split,
                 "samples": len(samples), "ks": args.ks, "methods": list(methods),
                 "threads": torch.get_num_threads(), "seconds": round(time.perf_counter() - t_start, 1),
                 "records": len(log), "date": time.strftime("%Y-%m-%d %H:%M"),
                 "command": "python -m picaso_core.experiments " + " ".join(sys.argv[1:] if argv is None else argv),
                 "training_tokens": _training_tokens(args.model)},
        "timing": timing, "lengths": chunk_lengths(model, texts), "skipped": skipped,
    }
    summary = summarize(log.records.values(), plan, extra)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    if args.ship:
        Path(args.ship).parent.mkdir(parents=True, exist_ok=True)
        Path(args.ship).write_text(json.dumps(summary, indent=1) + "\n")
    md = paper_vs_ours(summary)
    (out / "paper_vs_ours.md").write_text(md)
    from picaso_core.plots.report import write_report  # after the run: the CLI's HTML output; the protocol needs no plotly

    write_report(summary, out / "report.html")
    print(md)
    print(f"done in {time.perf_counter() - t_start:.0f} s: {out}/records.jsonl, summary.json, report.html, paper_vs_ours.md")
    return summary


def _training_tokens(model: str) -> int | None:
    """The demo model's training sequence length (its train_log.json), to mark on fig. 6."""
    from picaso_core.engine.loading import DEMO_MODEL_DIR  # inside the run, as in _run: engine.model is heavy

    folder = DEMO_MODEL_DIR if model == "demo" else Path(model)
    try:
        return int(json.loads((folder / "train_log.json").read_text())["args"]["seq_len"])
    except (OSError, KeyError, ValueError, TypeError):
        return None


if __name__ == "__main__":
    main()
