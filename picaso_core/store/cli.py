"""`python -m picaso_core.store build | check | repair`: the state store's command line.

    python -m picaso_core.store build --model demo --corpus demo --split test --out stores/demo
    python -m picaso_core.store check stores/demo        # sizes and sha256 against store.json
    python -m picaso_core.store repair stores/demo       # re-encode damaged shards' contexts

Every known fault (a damaged store, a bad corpus file, a folder that cannot be written) prints one
`error: ...` line naming the file and the fix and exits 1; anything else is a bug and keeps its
traceback.
"""

from __future__ import annotations

import argparse
import errno
import sys
from typing import Sequence

from picaso_core.data import CorpusError, limit_corpus, load_corpus  # torch-free
from picaso_core.light.defaults import count

# The store's modules import torch: each command imports them after its arguments are read, so that
# `--help` and a bad value answer at once. What the help says of the on-disk format (format.py's
# META_FILE, DAMAGED) is written out here for the same reason.
META_FILE, DAMAGED = "store.json", "damaged"
BUILD_DOC = "Build a StateStore from a corpus, on this machine or on a Ray cluster (paper sec. 3.2)."


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m picaso_core.store", description="Build, check and repair a state store.")
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="encode a corpus's contexts into a state store (resumable)",
                       description=BUILD_DOC)
    b.add_argument("--model", default="demo", help="'demo', a checkpoint folder, or a hub id")
    b.add_argument("--corpus", default="demo", help="demo | wikitext | msmarco | a .jsonl file")
    b.add_argument("--split", default="test")
    b.add_argument("--out", required=True, help="the store's folder or fsspec URL (s3://, gs://, hf://, file://)")
    b.add_argument("--engine", choices=("local", "ray"), default="local")
    b.add_argument("--workers", type=count(1), default=None,
                   help="Ray actors (default: the cluster's GPUs, else 2); each loads the model once")
    b.add_argument("--dtype", choices=("float32", "float16", "bfloat16"), default="float32",
                   help="precision of the stored ssm and conv states (decays stay float32)")
    b.add_argument("--address", default=None, help="an existing Ray cluster ('auto', 'ray://head:10001'); "
                   "default: start a local Ray runtime")
    b.add_argument("--max-contexts", type=count(1), default=None,
                   help="only the contexts the app keeps with the same --max-contexts")
    b.add_argument("--shard-size", type=count(1), default=None, help="contexts per shard (default: ~64 MiB of states)")
    b.add_argument("--batch-size", type=count(1), default=16, help="contexts per forward pass")
    b.add_argument("--device", default=None, help="the local engine's device (cpu, cuda)")
    b.add_argument("--verify", action=argparse.BooleanOptionalAction, default=None,
                   help="hash the shards already there against their sha256 and re-encode damaged ones "
                   "(default: on for a local folder, off for a URL; sizes are always checked)")
    b.add_argument("--rebuild-index", action="store_true",
                   help=f"rebuild {META_FILE} from the shards' sidecars (an unreadable index is moved to {DAMAGED}/)")
    for name, text in (("check", "verify every shard's size and sha256 against store.json (no model needed)"),
                       ("repair", f"re-encode the contexts of damaged shards from their stored text; the bad files "
                                  f"are moved to DIR/{DAMAGED}/")):
        c = sub.add_parser(name, help=text, description=text)
        c.add_argument("folder", metavar="DIR", help="the store's folder")
        if name == "repair":
            c.add_argument("--model", default=None, help="the store's model (default: the one its index names)")
            c.add_argument("--device", default=None, help="cpu, cuda")
    return p.parse_args(argv)




def main(argv: Sequence[str] | None = None) -> dict:
    """The CLI: every known fault is one `error: ...` line naming the fix, exit code 1."""
    args = parse_args(argv)
    # the store's modules (torch) after the arguments: --help and a bad value answer without them
    from picaso_core.data.hub import HubError
    from picaso_core.store import verify
    from picaso_core.store.format import StoreError

    try:
        if args.command != "build":
            return verify.check_cli(args.folder) if args.command == "check" else \
                verify.repair_cli(args.folder, args.model, args.device)
        return _build_cli(args)
    except (StoreError, CorpusError, HubError) as e:
        sys.exit(f"error: {e}")
    except OSError as e:  # a folder that cannot be written: name it, no traceback
        if e.errno not in (errno.EACCES, errno.EROFS, errno.EPERM, errno.ENOSPC) or not e.filename:
            raise  # a bug: its traceback
        sys.exit(f"error: cannot write {e.filename} ({e.strerror}); build into a folder this account can write, "
                 "with room for the states")


def _build_cli(args: argparse.Namespace) -> dict:
    from picaso_core.engine.loading import load_model  # after the arguments: --help answers without engine.model
    from picaso_core.store.build import build_store

    try:
        model = load_model(args.model, device=args.device)
    except (ValueError, FileNotFoundError) as e:
        sys.exit(f"error: {e}")
    model.name_or_path = args.model
    corpus = load_corpus(args.corpus, args.split)
    if args.max_contexts:
        corpus = limit_corpus(corpus, args.max_contexts)  # the app's cut, so both see the same contexts
    summary = build_store(model, list(corpus.database.items()), args.out, engine=args.engine,
                          workers=args.workers, dtype=args.dtype, address=args.address,
                          shard_size=args.shard_size, batch_size=args.batch_size, verify=args.verify,
                          rebuild_index=args.rebuild_index)
    rate = f", {summary['contexts_per_s']:.1f} contexts/s" if summary["contexts_per_s"] else ""
    print(f"{args.out}: encoded {summary['encoded']} contexts in {summary['seconds']:.1f} s{rate}, "
          f"{summary['skipped']} already there; {summary['shards']} shards, {summary['nbytes'] / 2**20:.1f} MiB")
    return summary
