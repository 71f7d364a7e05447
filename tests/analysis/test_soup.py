"""State Soup lab (picaso_core.analysis.soup) and the tab's handlers, on tiny random models; no server.

Two tasks (and their shuffled twins), 3 states each keep the library small: the invariants do not
need a trained model.
"""

from __future__ import annotations


import numpy as np
import pytest
import torch

from picaso_core import load_model

from picaso_core.analysis import soup, soup_mixing, soup_projection
from picaso_core.compose import compose
from picaso_core.data.skills import load_skill_tasks
from picaso_core.plots import soup as plots
from picaso_core.store.store import StateStore
from tests.conftest import bare_resources

TASKS = ["antonym", "counting"]


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    return load_model(str(tiny_model_dir))  # conftest's tiny random Mamba-2 with its tiny tokenizer


@pytest.fixture(scope="module")
def lib(model):
    return soup.SkillLibrary.build(model, TASKS, shots=4, per_task=3, seed=0)


# ---- the library ------------------------------------------------------------------------------
def test_library_holds_every_task_and_its_shuffled_twin(lib):
    assert lib.task_list == ["antonym", "antonym_shuffled", "counting", "counting_shuffled"]
    assert len(lib) == len(lib.tasks) == len(lib.texts) == 12
    train = dict((t, set(p)) for t, p in load_skill_tasks("train").items())
    for task, txt in zip(lib.tasks, lib.texts):
        lines = txt.strip("\n").split("\n")
        assert len(lines) == 4
        for line in lines:  # every demonstration line is a train item of its own task
            q, a = line.split(" → ")
            assert (q, a) in train[task]
    # demonstrations of one task are disjoint while the items last (paper A.1)
    ant = [set(t.split("\n")) - {""} for task, t in zip(lib.tasks, lib.texts) if task == "antonym"]
    assert not (ant[0] & ant[1]) and not (ant[1] & ant[2])


def test_library_is_deterministic_per_seed_and_equals_one_at_a_time_encoding(model, lib):
    again = soup.SkillLibrary.build(model, TASKS, shots=4, per_task=3, seed=0)
    assert again.texts == lib.texts
    for a, b in zip(again.states, lib.states):
        torch.testing.assert_close(a.ssm, b.ssm)
    other = soup.SkillLibrary.build(model, TASKS, shots=4, per_task=3, seed=1)
    assert other.texts != lib.texts
    one = model.encode_context(model.tokenizer.encode(lib.texts[5]))
    torch.testing.assert_close(one.ssm, lib.states[5].ssm, atol=1e-5, rtol=1e-5)


def test_library_reopens_from_its_store_without_encoding(model, lib, tmp_path, monkeypatch):
    folder = soup.SkillLibrary.default_folder(tmp_path, model, TASKS, 4, 3, 0)
    built = soup.SkillLibrary.build(model, TASKS, shots=4, per_task=3, seed=0, store=folder)
    assert (folder / "store.json").exists() and len(StateStore.open(folder, model)) == 12

    def no_encoding(*a, **k):
        raise AssertionError("the library was encoded again instead of read from its store")

    monkeypatch.setattr(model, "encode_contexts", no_encoding)
    monkeypatch.setattr(model, "hidden_states", no_encoding)
    reopened = soup.SkillLibrary.build(model, TASKS, shots=4, per_task=3, seed=0, store=folder)
    assert reopened.tasks == lib.tasks and reopened.texts == lib.texts
    for a, b in zip(reopened.states, built.states):
        assert torch.equal(a.ssm, b.ssm) and torch.equal(a.conv, b.conv)
    # another seed is another folder: a store never serves a stale library
    assert soup.SkillLibrary.default_folder(tmp_path, model, TASKS, 4, 3, 1) != folder


def test_bad_library_arguments_raise(model):
    with pytest.raises(ValueError, match="unknown task 'juggling'"):
        soup.SkillLibrary.build(model, ["juggling"])
    with pytest.raises(ValueError, match="shots"):
        soup.SkillLibrary.build(model, ["antonym"], shots=0, per_task=1)
    with pytest.raises(ValueError, match="per_task"):
        soup.SkillLibrary.build(model, ["antonym"], shots=2, per_task=0)


# ---- features and projections -----------------------------------------------------------------
def test_features_shapes_per_layer_and_part(model, lib):
    cfg = model.config
    shapes = cfg.state_shapes()
    for layer in range(cfg.n_layer):
        ssm = soup.features(lib.states, layer, "ssm")
        conv = soup.features(lib.states, layer, "conv")
        assert ssm.shape == (12, int(np.prod(shapes["ssm"][1:])))
        assert conv.shape == (12, int(np.prod(shapes["conv"][1:])))
        np.testing.assert_array_equal(ssm[4], lib.states[4].ssm[layer].reshape(-1).numpy())
    with pytest.raises(ValueError, match="out of range"):
        soup.features(lib.states, cfg.n_layer, "ssm")
    with pytest.raises(ValueError, match="out of range"):
        soup.features(lib.states, -1, "ssm")
    with pytest.raises(ValueError, match="part"):
        soup.features(lib.states, 0, "mlp")


def test_pca_matches_numpy_svd():
    x = np.random.default_rng(0).normal(size=(30, 200))
    z = soup_projection.pca(x, 3)
    xc = x - x.mean(0)
    u, s, _ = np.linalg.svd(xc, full_matrices=False)
    ref = u[:, :3] * s[:3]
    for j in range(3):  # equal up to the sign of each axis
        assert np.allclose(np.abs(z[:, j]), np.abs(ref[:, j]), atol=1e-4)
        assert abs(z[:, j]).max() == z[np.argmax(abs(z[:, j])), j]  # sign fixed: largest score positive


@pytest.mark.parametrize("method", ["pca", "tsne", "umap"])
def test_projections_are_deterministic_and_finite(method):
    x = np.random.default_rng(1).normal(size=(24, 64)).astype(np.float32)
    x[12:] += 3  # two clusters
    for dim in (2, 3):
        a = soup_projection.project(x, method, dim, seed=0)
        b = soup_projection.project(x, method, dim, seed=0)
        assert a.shape == (24, dim) and np.isfinite(a).all()
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="dim"):
        soup_projection.project(x, method, 4)


def test_projection_rejects_unknown_method():
    with pytest.raises(ValueError, match="method"):
        soup_projection.project(np.zeros((8, 3)), "mds")


def test_cluster_quality_matches_brute_force(lib):
    q = soup.cluster_quality(lib, layers=[1])
    labels = lib.tasks
    x = soup.features(lib.states, 1, "ssm")
    hits = 0
    for i in range(len(x)):  # leave-one-out nearest neighbour by cosine, one state at a time
        sims = [np.dot(x[i], x[j]) / np.linalg.norm(x[i]) / np.linalg.norm(x[j]) if j != i else -2 for j in range(len(x))]
        hits += labels[int(np.argmax(sims))] == labels[i]
    assert q["ssm"]["nn_accuracy"][0] == pytest.approx(hits / len(x))
    assert -1 <= q["ssm"]["silhouette"][0] <= 1 and q["chance"] == 0.25


# ---- retrieval and mixing ---------------------------------------------------------------------
def test_a_library_state_retrieves_its_own_task(model, lib):
    for i in (0, 4, 11):
        for part in ("ssm", "conv"):
            (task, sim), *_ = lib.retrieve(lib.states[i], layer=1, part=part, top=3)
            assert task == lib.tasks[i] and sim == pytest.approx(1.0, abs=1e-5)
    got = lib.retrieve(lib.states[0], 0, top=5)
    assert len(got) == 5 and [s for _, s in got] == sorted((s for _, s in got), reverse=True)
    with pytest.raises(ValueError, match="top"):
        lib.retrieve(lib.states[0], 0, top=0)


def test_retrieval_accuracy_counts_nearest_task(model, lib):
    r = soup.retrieval_accuracy(model, lib, ks=(1, 2), queries=2, layers=[0, 1])
    assert r["ks"] == [1, 2] and len(r["accuracy"]) == 2
    assert all(0 <= a <= 1 and a * 8 == int(a * 8) for row in r["accuracy"] for a in row)  # 8 queries per k
    with pytest.raises(ValueError, match="k must be >= 1"):
        soup.retrieval_accuracy(model, lib, ks=(0, 1), queries=1)


def test_mix_of_one_state_is_that_state(lib):
    mixed = compose("soup", [lib.states[3]])
    assert torch.equal(mixed.ssm, lib.states[3].ssm) and torch.equal(mixed.conv, lib.states[3].conv)


def test_two_task_mix_at_w_0_and_1_equals_the_parts(model, lib):
    a, b = soup_mixing.task_state(lib, "antonym"), soup_mixing.task_state(lib, "counting")
    for w, part in ((1.0, a), (0.0, b)):
        mixed = compose("weighted", [a, b], weights=[w, 1 - w])
        torch.testing.assert_close(mixed.ssm, part.ssm, atol=0, rtol=0)
        torch.testing.assert_close(mixed.conv, part.conv, atol=0, rtol=0)
    prompt = "one →"
    rows = soup_mixing.two_task_mix(model, a, b, prompt, ["two", " big"], ws=[0.0, 0.5, 1.0], max_new_tokens=3)
    assert [r["w"] for r in rows] == [0.0, 0.5, 1.0]
    # the loss at w = 1 is the loss from A's state, at w = 0 from B's
    tok = model.tokenizer
    assert rows[-1]["losses"]["two"] == pytest.approx(model.continuation_loss(tok.encode(prompt), tok.encode(" two"), a), abs=1e-4)
    assert rows[0]["losses"]["big"] == pytest.approx(model.continuation_loss(tok.encode(prompt), tok.encode(" big"), b), abs=1e-4)
    gen = tok.decode(model.generate(tok.encode(prompt), a, max_new_tokens=3, temperature=0)).split("\n")[0].strip()
    assert rows[-1]["generation"] == gen
    with pytest.raises(ValueError, match="prompt is empty"):
        soup_mixing.two_task_mix(model, a, b, "  ", ["two"])
    with pytest.raises(ValueError, match="not in the library"):
        soup_mixing.task_state(lib, "english_french")


def test_score_answer_matches_continuation_loss_and_greedy(model, lib):
    tok = model.tokenizer
    states = lib.states[:3]
    losses, exact = soup_mixing.score_answer(model, states, "cat →", " cats")
    for s, loss, ok in zip(states, losses, exact):
        assert loss == pytest.approx(model.continuation_loss(tok.encode("cat →"), tok.encode(" cats"), s), abs=1e-4)
        target = tok.encode(" cats\n")
        gen = model.generate(tok.encode("cat →"), s, max_new_tokens=len(target), temperature=0, stop_at_eos=False)
        assert ok == (gen == target)


def test_mixing_tables_have_every_row(model, lib):
    rows = soup_mixing.mixing_table(model, ["counting"], total=4, ks=(1, 2, 4), queries=2)
    assert {(r["k"], r["method"]) for r in rows} == {(k, m) for k in (1, 2, 4) for m in ("k_shots", "soup", "all_shots")}
    by = {(r["k"], r["method"]): r for r in rows}
    # with k = total the soup is of one state: the same state as k shots alone and as all shots
    assert by[(4, "soup")]["loss"] == pytest.approx(by[(4, "k_shots")]["loss"], abs=1e-5)
    assert by[(4, "all_shots")]["loss"] == pytest.approx(by[(4, "k_shots")]["loss"], abs=1e-5)
    assert by[(1, "all_shots")]["loss"] == by[(2, "all_shots")]["loss"]
    with pytest.raises(ValueError, match="divide"):
        soup_mixing.mixing_table(model, ["counting"], total=4, ks=(3,), queries=1)
    rm = soup_mixing.retrieval_mixing(model, lib, ks=(1, 2), top=1, layer=1, queries=2)
    assert {(r["k"], r["method"]) for r in rm} == {(k, m) for k in (1, 2) for m in ("query", "retrieved_mix")}
    assert all(0 <= r["retrieval_hit"] <= 1 and r["n"] == 4 for r in rm)  # 2 base tasks x 2 queries


# ---- A-decay (sec. 2.3) -----------------------------------------------------------------------
def test_decay_comparison_orders_its_four_losses(model):
    tok = model.tokenizer
    ids = tok.encode("Velmora is a city in the northern province of Tarrix. Records show that Velmora was "
                     "founded in 1423 by the merchant Osric Dallen. The main export of Velmora is blue glass.")
    c1, c2, test = ids[:10], ids[10:20], ids[20:30]
    d = soup_mixing.decay_comparison(model, c1, c2, test)
    assert list(d.losses) == list(soup_mixing.DECAY_METHODS)
    assert d.order == sorted(d.losses, key=d.losses.get)
    ref = model.continuation_loss(test[:1], test[1:], model.encode_context(c1 + c2))
    assert d.losses["concat"] == pytest.approx(ref, abs=1e-4)  # concat is the state of c1 ⧺ c2
    assert d.losses["c2_only"] == pytest.approx(model.continuation_loss(test[:1], test[1:], model.encode_context(c2)), abs=1e-4)
    with pytest.raises(ValueError, match="at least"):
        soup_mixing.decay_comparison(model, [], c2, test)
    chunks = soup_mixing.document_chunks(["Velmora is a city."] * 40, tok, chunk_tokens=8, documents=3)
    assert len(chunks) == 3 and all(len(c) == 8 for ch in chunks for c in ch)
    t = soup_mixing.decay_table(model, chunks)
    assert t["n"] == 3 and set(t["mean_loss"]) == set(soup_mixing.DECAY_METHODS)
    assert t["order"] == sorted(t["mean_loss"], key=t["mean_loss"].get)
    with pytest.raises(ValueError, match="fewer than"):
        soup_mixing.document_chunks(["short"], tok, chunk_tokens=100)


def test_a_decay_is_exact_for_the_ssm_of_the_first_layer(model):
    """x(c1 ⧺ c2) = x(c2) + A(c2) x(c1) (sec. 2.3) holds exactly for layer 0's SSM once c2 is read
    with c1's conv window (layer 0's input depends on no state but that window); deeper layers and
    a c2 read from scratch only approximately."""
    from picaso_core.compose import decay_mix
    from picaso_core.engine.state import ContextState

    tok = model.tokenizer
    ids = tok.encode("cat → cats\ndog → dogs\nrun → ran\nhappy → sad\n")
    c1, c2 = ids[:9], ids[9:]
    concat = model.encode_context(c1 + c2)
    s1 = model.encode_context(c1)
    window_only = ContextState(torch.zeros_like(s1.ssm), s1.conv, torch.zeros_like(s1.log_decay), 0)
    s2 = model.encode_context(c2, state=window_only)
    mixed = decay_mix(s1, s2, conv="last")
    torch.testing.assert_close(mixed.ssm[0], concat.ssm[0], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(mixed.conv[0], concat.conv[0])  # c2's last inputs: the same tokens
    assert not torch.allclose(mixed.ssm[1:], concat.ssm[1:], atol=1e-5)  # stacked layers: approximate


# ---- figures ----------------------------------------------------------------------------------
def test_state_map_marks_shuffled_tasks_open_and_the_query(lib):
    xy = np.random.default_rng(0).normal(size=(len(lib), 2))
    fig = plots.state_map(xy, lib.tasks, lib.texts, "map", query={"xy": [0, 0], "text": "a → b\n"})
    names = [t.name for t in fig.data]
    assert names[:4] == lib.task_list and names[-1] == "your demonstration"
    sym = {t.name: t.marker.symbol for t in fig.data}
    assert sym["antonym"] == "circle" and sym["antonym_shuffled"] == "circle-open"
    assert fig.data[0].marker.color == fig.data[1].marker.color  # a twin shares its task's colour
    assert "→" in fig.data[0].text[0] and fig.layout.xaxis.title.text
    fig3 = plots.state_map(np.zeros((len(lib), 3)), lib.tasks, lib.texts, "map")
    assert fig3.data[0].type == "scatter3d"


# ---- the tab's handlers (no server) -----------------------------------------------------------
@pytest.fixture(scope="module")
def res(model, tmp_path_factory, monkeypatch_module):
    from picaso_core.ui.tabs import soup_lab

    monkeypatch_module.setattr(soup_lab, "SHOTS", 4)
    monkeypatch_module.setattr(soup_lab, "PER_TASK", 2)
    monkeypatch_module.setattr(soup_lab, "WARM_UMAP", False)
    folder = tmp_path_factory.mktemp("cache") / "corpus"
    return bare_resources(model, "tiny", folder, {"a": "Velmora is a city on the river Quell. " * 30})


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def test_tab_map_places_demonstrations_and_retrieves(res):
    import gradio as gr

    from picaso_core.ui.tabs import soup_handlers
    from picaso_core.ui.tabs import soup_lab

    fig, quality, summary, table, data, py, client = soup_handlers.soup_map(res, 1, "ssm", "pca", 2, "cat → cats\ndog → dogs")
    n = 2 * 20  # every task and twin, PER_TASK = 2
    assert len(data["coords"]) == len(data["tasks"]) == n and data["query"] is not None
    assert list(table.columns) == ["rank", "task", "cosine", "demonstration"] and len(table) == 5
    assert fig.data[-1].name == "your demonstration" and "Layer 1" in summary
    assert "soup_map" in client and "SkillLibrary" in py
    # the library was stored under the cache folder and is reused
    assert soup_lab.lab_for(res).folder.parent == res.cache_dir
    with pytest.raises(gr.Error, match="demonstration box is empty"):
        soup_handlers.soup_map(res, 1, "ssm", "pca", 2, "  \n", require_demos=True)
    with pytest.raises(gr.Error, match="layer"):
        soup_handlers.soup_map(res, 7, "ssm", "pca", 2)
    with pytest.raises(gr.Error, match="method"):
        soup_handlers.soup_map(res, 0, "ssm", "mds", 2)
    with pytest.raises(gr.Error, match="empty"):
        soup_handlers.retrieve(res, "", 0, "ssm", 5)


def test_tab_two_task_and_decay_and_curves(res):
    import gradio as gr

    from picaso_core.ui.tabs import soup_handlers

    fig, summary, table, data, *_ = soup_handlers.two_task(res, "counting", "antonym", "one →", "two\nbig", 0.25)
    assert 0.25 in list(table["w"]) and len(data["rows"]) == 12 and "w = 0.25" in summary
    assert list(table.columns) == soup_handlers.two_task_columns(["two", "big"]) == ["w", "generation", "loss “two”", "loss “big”"]
    with pytest.raises(gr.Error, match="task A"):
        soup_handlers.two_task(res, "juggling", "antonym", "one →", "two", 0.5)
    with pytest.raises(gr.Error, match="w must be"):
        soup_handlers.two_task(res, "counting", "antonym", "one →", "two", 1.5)
    fig, summary, table, t, *_ = soup_handlers.decay(res, 16, 2)
    assert t["n"] == 2 and len(table) == 4
    with pytest.raises(gr.Error, match="chunk tokens"):
        soup_handlers.decay(res, 0, 2)
    fig, summary, r, *_ = soup_handlers.retrieval_curve(res, 1, "conv")
    assert r["ks"] == list(soup_handlers.KS) and r["part"] == "conv"
    with pytest.raises(gr.Error, match="queries"):
        soup_handlers.retrieval_curve(res, 0)
