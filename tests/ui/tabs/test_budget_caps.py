"""Cost caps decided before any work (issue 47, item 1; picaso_core/ui/budget.py): for every
model-bound endpoint a request just over its cap is refused in ONE line that names the cap and what
exceeds it, with no model work done (the model's core, the store's states and each tab's heavy step
are patched to fail the test if reached); and every tab's defaults and the tour's runs are under
their caps. The handlers are called in-process on conftest's tiny model and facts corpus (`res`).
"""

from __future__ import annotations

import contextlib
import re

import gradio as gr
import pytest

from picaso_core.ui import budget
from picaso_core.ui.tabs import attribution as A
from picaso_core.ui.tabs import benchmarks as B
from picaso_core.ui.tabs import coffee as CO
from picaso_core.ui.tabs import compose as C
from picaso_core.ui.tabs import finetune as FT
from picaso_core.ui.tabs import landscape as L
from picaso_core.ui.tabs import primer as P
from picaso_core.ui.tabs import soup_handlers as S

QUERY, ANSWER = "Velmora, the city of blue glass, was founded", " in 1423 by Osric Dallen."


class ModelWork(AssertionError):
    """Raised where a refused request would have started model work."""


def _work(*a, **kw):
    raise ModelWork("model work started before the cap refused the request")


@pytest.fixture
def no_work(res, monkeypatch):
    """Any model work fails the test: the engine's forward core and step, the store's states, and the
    heavy first step of the tabs that build their own models or data."""
    model = type(res.model)
    for name in ("_hidden_core", "_step_"):
        monkeypatch.setattr(model, name, _work)
    monkeypatch.setattr(res, "states", _work)
    monkeypatch.setattr(S, "lab_for", _work)
    monkeypatch.setattr(L, "load_samples", _work)
    monkeypatch.setattr(P, "measure_complexity", _work)
    monkeypatch.setattr(CO, "Run", _work)
    monkeypatch.setattr(FT, "_RUN_LOCK", None)  # acquired right after the checks: None.acquire fails
    return res


@contextlib.contextmanager
def over_cap(endpoint: str):
    """Expects the one-line refusal naming the endpoint's cap: '... is N <unit>: at most <cap> ...'
    (or 'N <unit>: at most <cap>' where the estimate is one input)."""
    cap = budget.CAPS[endpoint]
    with pytest.raises(gr.Error) as e:
        yield e
    msg = e.value.message
    assert "\n" not in msg and f"at most {cap.most:,}" in msg and cap.unit in msg, msg
    n = int(re.search(r"(?:^| is )([\d,]+) " + re.escape(cap.unit), msg).group(1).replace(",", ""))
    assert n > cap.most, msg


def _shrink(monkeypatch, endpoint: str, most: int):
    """The tiny corpus cannot reach some caps (3 samples): lower the cap to just under the request."""
    monkeypatch.setitem(budget.CAPS, endpoint, budget.Cap(budget.CAPS[endpoint].unit, most, "",
                                                          budget.CAPS[endpoint].fix))


def test_every_model_bound_endpoint_has_a_cap():
    named = {"/compose", "/generate_answer", "/attribute", "/attribution_precision", "/landscape", "/soup_map",
             "/soup_retrieve", "/soup_retrieval", "/soup_mixing", "/soup_two_task", "/soup_decay", "/primer_model",
             "/primer_attention", "/primer_complexity", "/benchmarks", "/coffee_train", "/coffee_ih0", "/finetune",
             "/tour_step"}
    assert named <= set(budget.CAPS)
    assert all(c.most >= 1 and c.unit and c.fix for c in budget.CAPS.values())


def test_the_refusal_names_the_estimate_and_the_cap():
    with over_cap("/attribute") as e:
        budget.check("/attribute", (80_001, "10 contexts x 8 methods"))
    assert e.value.message.startswith("10 contexts x 8 methods is 80,001 token-forwards: at most 80,000;")
    assert budget.check("/attribute", (80_000, "")) == 80_000  # at the cap: served


def test_compose_picked_contexts(no_work):
    ids = list(no_work.database)[:1] * 11
    with over_cap("/compose"):
        C.compose(no_work, QUERY, "", 5, ids)


def test_attribute_ablations_times_query_tokens(no_work):
    # a 1,000-character query (~250+ tokens) x 256 ablations x 1.25 is over 80,000 token-forwards
    with over_cap("/attribute") as e:
        A.attribute(no_work, (QUERY + " x" * 600)[:1000], ANSWER, 2, ablations=256)
    assert "ablations" in e.value.message and "fewer ablations" in e.value.message
    # the same request with the default 64 ablations and a short query is within the cap
    ids = A.choose_contexts(no_work, QUERY, 2, None)
    assert A.attribute_cost(no_work, QUERY, ANSWER, ids, list(A.METHODS), A.TOKEN_METHOD, "context", "states",
                            64)[0] <= budget.CAPS["/attribute"].most


def test_attribution_precision_examples_times_methods(no_work, monkeypatch):
    monkeypatch.setattr(A, "qa_samples", lambda res, q=A.qa_samples(no_work): q * 100)  # enough examples
    n = A.PRECISION_SLIDER_MAX + 1
    with over_cap("/attribution_precision"):
        A.run_precision(no_work, n)


def test_landscape_grid_points(no_work, monkeypatch):
    samples = len(L.average_ids(no_work))
    _shrink(monkeypatch, "/landscape", samples * 9 * 9 - 1)
    with over_cap("/landscape"):
        L.landscape(no_work, L.AVERAGE, 9, "u1-u2")


def test_soup_endpoints(no_work, monkeypatch):
    with over_cap("/soup_retrieval"):
        S.retrieval_curve(no_work, budget.CAPS["/soup_retrieval"].most // len(S.KS) + 1)
    with over_cap("/soup_mixing"):
        S.mixing(no_work, budget.CAPS["/soup_mixing"].most + 1)
    with over_cap("/soup_decay"):
        S.decay(no_work, 200, budget.CAPS["/soup_decay"].most // 200 + 1)
    with over_cap("/soup_two_task"):
        S.two_task(no_work, prompt=" ".join("abcdefghij" * 10)[:197] + " →", answers="\n".join(["Bats"] * 10))
    _shrink(monkeypatch, "/soup_map", 1)
    with over_cap("/soup_map"):
        S.soup_map(no_work, demos="cat → cats\ndog → dogs")
    _shrink(monkeypatch, "/soup_retrieve", 1)
    with over_cap("/soup_retrieve"):
        S.retrieve(no_work, "cat → cats\ndog → dogs")


def test_primer_complexity_tokens_timed(no_work):
    with over_cap("/primer_complexity"):
        P.complexity(no_work, f"256, {P.MAX_LENGTH}")


def test_benchmarks_samples_ks_methods(no_work, monkeypatch):
    _shrink(monkeypatch, "/benchmarks", 2 * 11 * len(B.METHODS) - 1)
    with over_cap("/benchmarks"):
        list(B.run_live(no_work, 2, "0-10", list(B.METHODS)))


def test_coffee_and_finetune(no_work):
    with over_cap("/coffee_ih0"):
        CO.ih0_run(budget.CAPS["/coffee_ih0"].most + 1, "all")
    k = FT.MAX_K
    with over_cap("/finetune"):
        list(FT.run_live(no_work, "bptc", budget.CAPS["/finetune"].most // (k + 1) + 1, k, 3e-4))


@pytest.fixture(scope="module")
def demo_res(tmp_path_factory):
    """The bundled demo model and corpus: the tour's and the tabs' defaults are its examples."""
    from picaso_core.session import load_resources

    return load_resources("demo", "demo", cache_dir=tmp_path_factory.mktemp("demo-cache"), log=lambda *a: None)


def test_the_landscape_default_is_served_from_its_cache_not_refused(res, monkeypatch):
    # the tab's default (the average of 10 samples, 21 x 21) is over the cap live; it is shipped or
    # computed once and cached, so its request is never refused
    monkeypatch.setattr(L, "default_result", lambda res, progress=None: "cached")
    monkeypatch.setattr(L, "outputs", lambda d, view: d)
    assert budget.landscape(L.AVERAGE_N, L.STEPS)[0] > budget.CAPS["/landscape"].most
    assert L.landscape(res) == "cached"


def test_the_tabs_defaults_and_the_tours_runs_are_under_their_caps(demo_res):
    from picaso_core.ui.tour.steps import OPENINGS, STEPS

    res = demo_res
    tour = [*STEPS, *(s for ss in OPENINGS.values() for s in ss)]
    assert max(s.inputs.get("k", C.DEFAULTS["k"]) for s in tour if s.tab == "compose") <= budget.CAPS["/compose"].most
    # /attribute: the tour's runs (the tab's defaults: 5 contexts, every method, 64 ablations, states),
    # with the example's answer typed or left to generate (counted as 64 tokens)
    runs = [s.inputs for s in tour if s.run == "attribution"]
    assert {r.get("grain", "context") for r in runs} == {"context", "sentence"}
    for r in runs:
        query, answer, picked = A.pick_example(res, r["example"])
        ids = A.choose_contexts(res, query, r["k"], picked or None)
        for given in (answer, ""):
            n, how = A.attribute_cost(res, query, given, ids, list(A.METHODS), A.TOKEN_METHOD,
                                      r.get("grain", "context"), "states", A.src.DEFAULT_ABLATIONS)
            assert n <= budget.CAPS["/attribute"].most, (r, how, n)
    landscape = next(s.inputs for s in tour if s.run == "landscape")
    assert budget.landscape(1, landscape["steps"])[0] <= budget.CAPS["/landscape"].most
    assert budget.lines(S.DEFAULT_PROMPT.count("\n") + 3)[0] <= budget.CAPS["/soup_map"].most
    # the tabs' defaults (their sliders' values and the API's)
    assert budget.attribution_precision(20, len(A.METHODS))[0] <= budget.CAPS["/attribution_precision"].most
    assert budget.soup_retrieval(4, len(S.KS))[0] <= budget.CAPS["/soup_retrieval"].most
    assert 3 <= budget.CAPS["/soup_mixing"].most
    assert budget.soup_decay(100, 10)[0] <= budget.CAPS["/soup_decay"].most
    prompt_tokens = len(res.model.tokenizer.encode(S.DEFAULT_PROMPT))
    answers = [a for a in S.DEFAULT_ANSWERS.split("\n") if a.strip()]
    assert budget.soup_two_task(len(answers), prompt_tokens)[0] <= budget.CAPS["/soup_two_task"].most
    assert budget.primer_complexity(P.parse_lengths("256, 512, 1024, 2048, 4096"))[0] <= \
        budget.CAPS["/primer_complexity"].most
    assert budget.benchmarks(5, 4, len(B.METHODS))[0] <= budget.CAPS["/benchmarks"].most
    assert 200 <= budget.CAPS["/coffee_ih0"].most and 30 <= budget.CAPS["/coffee_train"].most
    assert budget.finetune(40, 5)[0] <= budget.CAPS["/finetune"].most
    # the sliders' maxima are within the caps where one slider alone decides
    assert A.PRECISION_SLIDER_MAX * len(A.METHODS) <= budget.CAPS["/attribution_precision"].most
