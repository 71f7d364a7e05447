"""Time the largest requests the input caps still allow, on the demo model:

    THREADS=2 python bench/caps_timing.py [attr] [compose] [soup]    # PICASO_CACHE: the state store
    python bench/caps_timing.py attr --threads 2 --json out.json

Attribution at a 1,000-character query and k = 10 (retrieved with the generated answer, and the 10
longest contexts with a 64-token answer), /compose at 4,000 + 4,000 characters with k = 10 and 64
new tokens, and State soup at its caps (63 demonstration lines, 10 answers of 99 characters)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import parse, parser, text_of, write_json  # noqa: E402

PARTS = ("attr", "compose", "soup")


def main(argv=None) -> None:
    ap = parser(__doc__, threads=int(os.environ.get("THREADS", "1")),
                helps={"threads": "torch threads (default: $THREADS, else 1)"})
    ap.add_argument("parts", nargs="*", choices=[[], *PARTS], default=[], metavar="PART",
                    help="what to time: attr, compose, soup (default: all)")
    args = parse(ap, argv)
    which = args.parts or list(PARTS)

    from picaso_core.ui.tabs import attribution as A
    from picaso_core.ui.tabs import compose as C
    from picaso_core.ui.tabs import soup_handlers as S
    from picaso_core.session import load_resources

    figures = {}

    def tm(label, f):
        t = time.perf_counter()
        out = f()
        figures[label] = dt = time.perf_counter() - t
        print(f"{label}: {dt:.1f} s", flush=True)
        return out

    t0 = time.perf_counter()
    res = load_resources("demo", "demo", cache_dir=os.environ.get("PICASO_CACHE", "/tmp/picaso_caps_cache"),
                         log=lambda *a: None)
    print(f"load {time.perf_counter() - t0:.1f} s; max_tokens {res.max_tokens}; contexts {len(res.database)}", flush=True)
    print("load avg", os.getloadavg(), flush=True)
    # a 1,000-character query of real words (retrieval picks 10 contexts for it)
    words = " ".join(list(res.database.values())[:40]).split()

    def chars(n):
        return text_of(words, n)

    q1000 = chars(1000)
    tok = res.model.tokenizer
    # the 10 longest contexts (the most context tokens Attribution can be asked to read)
    longest = sorted(res.database, key=res.num_tokens, reverse=True)[:10]
    print("10 longest contexts:", sum(res.num_tokens(c) for c in longest), "tokens;",
          "query tokens", len(tok.encode(q1000)), flush=True)
    res.states(longest)  # encode once (the store keeps them): not what a request at the cap costs again
    if "attr" in which:
        ans = chars(A.MAX_ANSWER_CHARS)
        # the longest typed answer under both caps (chars and 64 tokens)
        while len(tok.encode(ans)) > A.MAX_ANSWER_TOKENS:
            ans = ans[:-10]
        print("answer tokens", len(tok.encode(ans)), flush=True)
        res.states(A.choose_contexts(res, q1000, 10, None))
        d = tm("attribution 1000-char query, k=10 retrieved, generated answer, all methods",
               lambda: A.run_attribution(res, q1000, "", 10))
        print("  per method", {m: round(s, 2) for m, s in d["seconds"].items()}, flush=True)
        d = tm(f"attribution 1000-char query, 10 longest contexts, {len(tok.encode(ans))}-token answer, all methods",
               lambda: A.run_attribution(res, q1000, ans, 10, longest))
        print("  per method", {m: round(s, 2) for m, s in d["seconds"].items()}, flush=True)
    if "compose" in which:
        q4000, c4000 = chars(4000), chars(4000)
        print("compose query tokens", len(tok.encode(q4000)), "continuation", len(tok.encode(c4000)), flush=True)
        tm("compose 4000-char query + 4000-char continuation, k=10, 64 new tokens",
           lambda: C.run_compose(res, C.ComposeRequest.of(res, q4000, c4000, 10, max_new_tokens=C.MAX_NEW_TOKENS)))
    if "soup" in which:
        lines = [f"{w} → {w[::-1]}" for w in words]
        demos = "\n".join(lines[:S.MAX_DEMO_LINES])
        demos = demos[:S.MAX_DEMO_CHARS].rsplit("\n", 1)[0]
        n_demos = demos.count("\n") + 1
        print("demo lines", n_demos, "chars", len(demos), flush=True)
        tm("soup library (first use, encoded into the store)", lambda: S.lab_for(res).library())
        tm("soup_map t-SNE first", lambda: S.soup_map(res))
        tm(f"soup_map place {n_demos} demonstration lines", lambda: S.soup_map(res, demos=demos, top=20, require_demos=True))
        ans = "\n".join(chars(99) for _ in range(S.MAX_ANSWERS))
        tm("two_task 10 answers of 99 chars, 200-char prompt",
           lambda: S.two_task(res, prompt=chars(198) + " →", answers=ans))
    write_json(args, figures)


if __name__ == "__main__":
    main()
