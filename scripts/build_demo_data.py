"""Regenerate the bundled demo data and tokenizer (seeded: two runs give identical files).

    python scripts/build_demo_data.py            # writes assets/demo_data/ (and assets/tokenizer.json if missing)
    python scripts/build_demo_data.py --tokenizer   # also retrains assets/tokenizer.json
    python scripts/build_demo_data.py --out /tmp/x --seed 1

Writes, under <out>/demo_data/:
    {train,test}_retrieval.jsonl   WikiText-protocol samples (RetrievalSample.to_dict per line)
    {train,test}_qa.jsonl          MS MARCO-shaped samples
    {train,test}_database.jsonl    every chunk of that split's world: {"id", "text"} per line
    skill_tasks.json               task -> {"train": [[q, a], ...], "test": [...]}
    {train,test}_database.all-MiniLM-L6-v2.safetensors
                                   the database's retrieval embeddings, so the app's first start
                                   embeds nothing (float output of MiniLM: not in the manifest's
                                   sha256 list, which holds the files that are bit-identical per seed)
    MANIFEST.json                  seed, counts and sha256 of every file
and <out>/tokenizer.json (byte-level BPE, 4096 pieces, trained on train-split world text only, so
held-out names are unseen by the tokenizer too; skill facts of both splits alike, TOKENIZER_MIX).
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from picaso_core.data.jsonl import write_chunks, write_samples  # noqa: E402
from picaso_core.data.demo_world import World, build_world, qa_sample, render_concat, retrieval_sample, training_examples  # noqa: E402
from picaso_core.data.skills import format_demos, load_skill_tasks  # noqa: E402
from picaso_core.engine.tokenizer import save, train_bpe  # noqa: E402

N_ENTITIES = 240  # per split; the first N_RETRIEVAL get a retrieval sample each
N_RETRIEVAL = 200
N_QA = 200
TOKENIZER_EXAMPLES = 6000  # training-stream examples the tokenizer is trained on
# Document shares of the tokenizer's corpus: the world's text as in mix v1, but skill facts as
# knowledge passages (every item, train and test alike), never as demonstrations. Demonstrations use
# train items only, so a corpus with them merges train answers into single pieces and leaves
# held-out answers in fragments. Measured on such a tokenizer: 83% of the train capitals are one
# token, 0% of the held-out ones, and a model trained on one-token answers after `→` ends its line
# after the first fragment of a held-out answer (" B" for " Bottle", " A" for " Amman"). Knowledge passages
# are ~60% of this corpus's documents, so that nearly every answer is one piece in both splits (as
# common words are in a real tokenizer); at 15% they stayed 2-5 fragments in both.
TOKENIZER_MIX = {"retrieval": 0.45, "qa": 0.2, "knowledge": 1.5, "passage": 0.15}
VOCAB_SIZE = 4096

# Generic English so the tokenizer (and a model trained with it) has pieces for ordinary prose,
# not only the world's templates: users type their own queries in the app.
GENERIC_ENGLISH = """\
The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins with a single step.
Language models read text one token at a time and predict what comes next. A state space model keeps
a fixed-size state that summarises everything it has read so far, so its memory does not grow with
the length of the input. When several documents are relevant to a question, their states can be
combined instead of reading all the documents again.
Once upon a time there was a small village at the edge of a great forest. Every morning the baker
opened his shop, the children walked to school, and the old clock in the square struck eight.
In the afternoon it began to rain, and people hurried home with their umbrellas and their bags.
What is the weather like today? It is sunny and warm, but the wind is cold. Where are you going?
I am going to the library to read about history, science, music, art, mathematics and geography.
Numbers: 0 1 2 3 4 5 6 7 8 9 10 25 100 365 1000 2024. Punctuation: , . ; : ! ? ' " ( ) [ ] - -- ...
Please write a short summary of the passage above. The answer is given below. Thank you very much.
The committee met on Monday to discuss the budget, the schedule and the new building.
Scientists measured the temperature of the water every hour and recorded the results in a table.
She said that she would arrive before noon, but the train was late and she missed the meeting.
"""


def build_split(seed: int, split: str) -> tuple[World, list, list]:
    """The split's world, its retrieval samples and its QA samples (pure function of seed)."""
    rng = random.Random(f"{seed}-{split}")  # str seeds hash deterministically (sha512)
    world = build_world(rng, N_ENTITIES, split)
    retrieval = [retrieval_sample(world, e, rng, f"demo-{split}-r{i:04d}") for i, e in enumerate(world.entities[:N_RETRIEVAL])]
    qa = [qa_sample(world, rng.choice(world.entities), rng, f"demo-{split}-q{i:04d}") for i in range(N_QA)]
    return world, retrieval, qa


def tokenizer_texts(seed: int) -> list[str]:
    """Train-split world text, knowledge passages of every skill item (train and test items alike,
    see TOKENIZER_MIX), each task's items once in demonstration format, generic English."""
    stream = training_examples(seed, "train", mix=TOKENIZER_MIX)
    texts = [render_concat(e) for e in itertools.islice(stream, TOKENIZER_EXAMPLES)]
    texts += [format_demos(pairs) for pairs in load_skill_tasks("all", include_shuffled=False).values()]
    texts += [GENERIC_ENGLISH] * 20
    return texts


def write_embeddings(data_dir: Path) -> None:
    """all-MiniLM-L6-v2 embeddings of each split's database, where the app looks for them
    (picaso_core.session.shipped_embeddings)."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from picaso_core.data.jsonl import read_chunks
    from picaso_core.retrieval.retriever import Retriever, SentenceEmbedder

    embedder = SentenceEmbedder()
    for split in ("train", "test"):
        db = read_chunks(data_dir / f"{split}_database.jsonl")
        path = data_dir / f"{split}_database.{embedder.name}.safetensors"
        # rows whose text is unchanged are kept, and an up-to-date file is not rewritten: a rerun
        # leaves the tree clean (re-embedding gave equal values but different bytes)
        Retriever.cached(db, embedder, path)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "assets", help="folder for tokenizer.json and demo_data/")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-embeddings", action="store_true", help="skip the MiniLM embeddings of the databases")
    ap.add_argument("--tokenizer", action="store_true",
                    help="retrain tokenizer.json too (it is kept when present: the bundled model depends on it)")
    args = ap.parse_args(argv)

    data_dir = args.out / "demo_data"
    data_dir.mkdir(parents=True, exist_ok=True)
    counts: dict[str, int] = {}
    for split in ("train", "test"):
        world, retrieval, qa = build_split(args.seed, split)
        write_chunks(world.database, data_dir / f"{split}_database.jsonl")
        write_samples(retrieval, data_dir / f"{split}_retrieval.jsonl")
        write_samples(qa, data_dir / f"{split}_qa.jsonl")
        counts.update({f"{split}_database.jsonl": len(world.database), f"{split}_retrieval.jsonl": len(retrieval), f"{split}_qa.jsonl": len(qa)})

    if not args.no_embeddings:
        write_embeddings(data_dir)

    tasks = {
        name: {"train": load_skill_tasks("train")[name], "test": load_skill_tasks("test")[name]}
        for name in load_skill_tasks("all")
    }
    (data_dir / "skill_tasks.json").write_text(json.dumps(tasks, ensure_ascii=False, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    counts["skill_tasks.json"] = len(tasks)

    if args.tokenizer or not (args.out / "tokenizer.json").exists():
        save(train_bpe(tokenizer_texts(args.seed), VOCAB_SIZE), args.out / "tokenizer.json")

    # the files this script writes, nothing else: landscape_default.json in the same folder is
    # scripts/measure_landscape.py's, and hashing it here left MANIFEST.json stale after either ran
    files = sorted(data_dir / name for name in counts) + [args.out / "tokenizer.json"]
    manifest = {
        "seed": args.seed,
        "counts": counts,
        "sha256": {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in files},
    }
    (data_dir / "MANIFEST.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    total = sum(p.stat().st_size for p in files)
    print(f"wrote {data_dir} and {args.out / 'tokenizer.json'}: {total / 1e6:.2f} MB, {counts}")


if __name__ == "__main__":
    main()
