"""The worst time of a capped request on each model-bound endpoint, on the demo model: each handler
called with the largest inputs its caps (picaso_core/ui/budget.py and the tabs' own checks) still
accept, as a job of the app would run it. The table in docs/serving.md ("Bounded work") and the
default time limits (picaso_core/ui/server/time_limits.py) come from it.

    THREADS=1 python bench/caps_worst.py                  # every part; PICASO_CACHE: the state store
    python bench/caps_worst.py compose attribute --threads 1 --json out.json

Parts: compose, generate, attribute, precision, landscape, soup, primer, benchmarks, coffee,
finetune. Each is timed at the largest inputs within its cost cap (budget.CAPS), e.g. /attribute with
the most ablations its cap allows at each grain. /coffee_train is bounded by its own time budget
(at most coffee.MAX_SECONDS of training, its cap), so it is not timed here; /tour_step runs the tour's
steps, whose inputs are the tabs' defaults. Run one part at a time on a busy machine."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import parse, parser, text_of, write_json  # noqa: E402

PARTS = ("compose", "generate", "attribute", "precision", "landscape", "soup", "primer", "benchmarks", "coffee",
         "finetune")


def main(argv=None) -> None:
    ap = parser(__doc__, threads=int(os.environ.get("THREADS", "1")),
                helps={"threads": "torch threads (default: $THREADS, else 1: one of the app's 2 workers on 2 cores)"})
    ap.add_argument("parts", nargs="*", choices=[[], *PARTS], default=[], metavar="PART",
                    help=f"what to time: {', '.join(PARTS)} (default: all)")
    args = parse(ap, argv)
    which = args.parts or list(PARTS)

    # the app's modules: imported after the arguments are read, so --help answers at once
    from picaso_core.session import load_resources
    from picaso_core.ui import budget
    from picaso_core.ui.tabs import attribution as A
    from picaso_core.ui.tabs import attribution_panel as AP
    from picaso_core.ui.tabs import benchmarks as B
    from picaso_core.ui.tabs import coffee as CO
    from picaso_core.ui.tabs import compose as C
    from picaso_core.ui.tabs import finetune as FT
    from picaso_core.ui.tabs import landscape as L
    from picaso_core.ui.tabs import primer as P
    from picaso_core.ui.tabs import soup_handlers as S

    figures = {}

    def tm(label, f):
        t = time.perf_counter()
        try:
            out = f()
            if hasattr(out, "__next__"):  # a generator endpoint: run it to its end
                for _ in out:
                    pass
        except Exception as e:  # noqa: BLE001  (a refusal is a finding: the request is above a cap)
            print(f"{label}: refused: {str(e)[:200]}", flush=True)
            return
        figures[label] = dt = time.perf_counter() - t
        print(f"{label}: {dt:.1f} s", flush=True)

    t0 = time.perf_counter()
    res = load_resources("demo", "demo", cache_dir=os.environ.get("PICASO_CACHE", "/tmp/picaso_caps_cache"),
                         log=lambda *a: None)
    print(f"load {time.perf_counter() - t0:.1f} s; max_tokens {res.max_tokens}; contexts {len(res.database)}; "
          f"load avg {os.getloadavg()}", flush=True)
    words = " ".join(list(res.database.values())[:40]).split()

    def chars(n):
        return text_of(words, n)

    tok = res.model.tokenizer

    def fit(n_tokens):  # the longest text of real words with at most n_tokens tokens
        s = chars(4000)
        while len(tok.encode(s)) > n_tokens:
            s = s[:-20]
        return s

    # the 10 longest contexts that fit the token cap together: the most a request may ask to read
    longest = []
    for cid in sorted(res.database, key=res.num_tokens, reverse=True):
        if len(longest) < 10 and sum(map(res.num_tokens, longest)) + res.num_tokens(cid) <= res.max_tokens:
            longest.append(cid)
    print(f"{len(longest)} longest contexts: {sum(map(res.num_tokens, longest))} tokens", flush=True)
    res.states(longest)  # encoded once into the store, as a served app's would be after the first use

    if "compose" in which:
        q, c = chars(4000), chars(4000)
        while len(tok.encode(q)) + len(tok.encode(c)) > res.max_tokens:
            c = c[:-200]
        tm("/compose: 10 longest contexts picked, 4000-char query + continuation, 64 new tokens",
           lambda: C.compose(res, q, c, 10, list(longest), max_new_tokens=C.MAX_NEW_TOKENS))
    if "generate" in which:
        tm("/generate_answer: 1000-char query, 10 longest contexts",
           lambda: A.generate_answer(res, chars(A.MAX_QUERY_CHARS), 10, list(longest)))
    cap = lambda ep: budget.CAPS[ep].most  # noqa: E731
    if "attribute" in which:
        q = chars(A.MAX_QUERY_CHARS)
        ans = chars(A.MAX_ANSWER_CHARS)
        while len(tok.encode(ans)) > A.MAX_ANSWER_TOKENS:
            ans = ans[:-10]

        def most_ablations(ids, grain, way):  # the most ablations whose request is within the cap
            methods = [m for m in A.METHODS if m != "picconcat_r" or len(ids) <= A.PICCONCAT_MAX_CONTEXTS]
            fits = [n for n in range(2, AP.MAX_ABLATIONS + 1)
                    if A.attribute_cost(res, q, ans, ids, methods, A.TOKEN_METHOD, grain, way, n)[0] <= cap(A.ENDPOINT)]
            return max(fits) if fits else None

        for n, grain, way in ((10, "context", "states"), (5, "context", "states"), (10, "context", "reencode"),
                              (3, "sentence", "states"), (2, "sentence", "reencode")):
            ids = list(longest[:n])
            ab = most_ablations(ids, grain, way)
            if ab is None:
                print(f"/attribute: {n} longest, {grain} grain, {way}: over the cap with any ablations", flush=True)
                continue
            tm(f"/attribute: {n} longest, {grain} grain, {way}, 1000-char query, 64-token answer, all methods, "
               f"{ab} ablations", lambda: A.attribute(res, q, ans, n, ids, grain=grain, way=way, ablations=ab))
    if "precision" in which:
        tm(f"/attribution_precision: {A.PRECISION_SLIDER_MAX} examples, all methods",
           lambda: A.run_precision(res, A.PRECISION_SLIDER_MAX))
    if "landscape" in which:
        steps = max(s for s in range(L.STEPS_MIN, L.STEPS_MAX + 1, 2) if L.AVERAGE_N * s * s <= cap(L.ENDPOINT))
        tm(f"/landscape: average, {steps} steps, u1-u2", lambda: L.landscape(res, L.AVERAGE, steps, "u1-u2"))
        one = res.corpus.samples[0].sample_id
        tm(f"/landscape: one sample, {L.STEPS_MAX} steps, u1-u2", lambda: L.landscape(res, one, L.STEPS_MAX, "u1-u2"))
    if "soup" in which:
        demos = "\n".join(f"{w} → {w[::-1]}" for w in words[:S.MAX_DEMO_LINES])
        demos = demos[:S.MAX_DEMO_CHARS].rsplit("\n", 1)[0]
        tm("/soup_map: library (first use) + t-SNE, capped demonstrations",
           lambda: S.soup_map(res, method="tsne", demos=demos, top=50))
        tm("/soup_map: UMAP 3-d", lambda: S.soup_map(res, method="umap", dim=3, demos=demos, top=50))
        tm("/soup_retrieve: capped demonstrations, top 50", lambda: S.retrieve(res, demos, None, "ssm", 50))
        nq = cap("/soup_retrieval") // len(S.KS)
        tm(f"/soup_retrieval: {nq} queries", lambda: S.retrieval_curve(res, nq))
        tm(f"/soup_mixing: {cap('/soup_mixing')} queries", lambda: S.mixing(res, cap("/soup_mixing")))
        ans = "\n".join(chars(S.MAX_ANSWER_CHARS - 1) for _ in range(S.MAX_ANSWERS))[:S.MAX_ANSWERS_CHARS]
        tm("/soup_two_task: 10 answers, 200-char prompt",
           lambda: S.two_task(res, prompt=chars(198) + " →", answers=ans))
        for ct in (400, 200):
            docs = min(200, cap("/soup_decay") // ct)
            tm(f"/soup_decay: {ct}-token chunks, {docs} documents", lambda: S.decay(res, ct, docs))
    if "primer" in which:
        tm("/primer_model: 256 tokens", lambda: P.model_view(res, fit(P.MAX_TEXT_TOKENS)))
        tm("/primer_attention: 128 tokens", lambda: P.attention_view(res, fit(P.MAX_M_TOKENS)))
        most = cap("/primer_complexity")
        for lengths in (", ".join(str(most >> i) for i in range(P.MAX_LENGTHS)), f"256, {most}"):
            tm(f"/primer_complexity: {lengths}", lambda: P.complexity(res, lengths, True))
    if "benchmarks" in which:
        for n, ks in ((5, f"0-{B.MAX_K}"), (cap(B.ENDPOINT) // (4 * len(B.METHODS)), "0,1,2,5")):
            tm(f"/benchmarks: {n} samples, ks {ks}, all methods",
               lambda: B.run_live(res, n, ks, list(B.METHODS[1:])))
    if "coffee" in which:
        tm(f"/coffee_ih0: {cap('/coffee_ih0')} steps, every parameter", lambda: CO.ih0_run(cap("/coffee_ih0"), "all"))
    if "finetune" in which:
        k = FT.MAX_K
        steps = min(FT.MAX_STEPS, cap(FT.ENDPOINT) // (k + 1))
        tm(f"/finetune: {steps} steps, k_max {k}", lambda: FT.run_live(res, "bptc", steps, k, 3e-4))
    print("load avg", os.getloadavg(), flush=True)
    write_json(args, figures)


if __name__ == "__main__":
    main()
