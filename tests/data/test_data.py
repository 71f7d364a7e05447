"""Data invariants: the demo world needs its contexts, splits are disjoint, loaders agree on one
sample shape, and every bad input fails loudly. No test downloads anything."""

from __future__ import annotations

import itertools
import json
import random
import re
import time
from pathlib import Path

import pytest
from conftest import script_module

from picaso_core.data import (
    CONTEXT_SEP,
    Corpus,
    RetrievalSample,
    format_demos,
    load_corpus,
    load_jsonl,
    load_skill_tasks,
    render_concat,
    render_parts,
    skill_query,
    training_examples,
    write_samples,
)
from picaso_core.data import hub
from picaso_core.data.demo_world import MIXES, build_world, qa_sample, retrieval_sample
from picaso_core.data.skills import ARROW, SHUFFLED_SUFFIX
from picaso_core.data.world import COMPANY_SUFFIXES, ENTITY_TYPES, draw_value, mentions, name_split
from picaso_core.engine.tokenizer import HUB_TIMEOUT_S

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def demo_test() -> Corpus:
    return load_corpus("demo", split="test")


@pytest.fixture(scope="module")
def demo_qa() -> Corpus:
    return load_corpus("demo", split="test", kind="qa")


def _build_script():
    return script_module("build_demo_data")


# ---- generator ----------------------------------------------------------------------------------


def test_training_examples_are_deterministic_per_seed():
    a = list(itertools.islice(training_examples(7), 60))
    b = list(itertools.islice(training_examples(7), 60))
    c = list(itertools.islice(training_examples(8), 60))
    assert a == b
    assert a != c
    assert {e["kind"] for e in a} == {"retrieval", "qa", "skill", "passage"}
    v2 = list(itertools.islice(training_examples(7, mix=MIXES["v2"]), 60))
    assert {e["kind"] for e in v2} == {"retrieval", "qa", "skill", "knowledge", "passage"}


def test_build_script_leaves_the_tree_clean_and_its_manifest_true(tmp_path):
    """`scripts/build_demo_data.py --no-embeddings`, run as a user runs it but over a copy of assets/
    (the copy holds every file of assets/demo_data, landscape_default.json and the embeddings
    included): no file changes, so the tree stays clean, and MANIFEST.json's sha256 list matches the
    files (a run must not leave the manifest stale). About 2 s."""
    import hashlib
    import shutil
    import subprocess
    import sys

    out = tmp_path / "assets"
    shutil.copytree(ROOT / "assets/demo_data", out / "demo_data")
    shutil.copy(ROOT / "assets/tokenizer.json", out / "tokenizer.json")
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    done = subprocess.run([sys.executable, str(ROOT / "scripts/build_demo_data.py"), "--no-embeddings", "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    after = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert after.keys() == before.keys()  # nothing new left beside the committed files
    changed = [str(name) for name in after if after[name] != before[name]]
    assert not changed, f"build_demo_data.py rewrote {changed}: the tree would be dirty"
    manifest = json.loads((out / "demo_data/MANIFEST.json").read_text())
    for name, digest in manifest["sha256"].items():
        path = out / name if name == "tokenizer.json" else out / "demo_data" / name
        assert hashlib.sha256(path.read_bytes()).hexdigest() == digest, name


def test_bundled_assets_match_the_generator():
    """The committed test split is exactly what the build script generates (determinism +
    assets up to date), checked in memory: tests never write to assets/."""
    mod = _build_script()
    _, retrieval, qa = mod.build_split(0, "test")
    _, retrieval2, _ = mod.build_split(0, "test")
    assert [s.to_dict() for s in retrieval] == [s.to_dict() for s in retrieval2]
    lines = (ROOT / "assets/demo_data/test_retrieval.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == [s.to_dict() for s in retrieval]
    lines = (ROOT / "assets/demo_data/test_qa.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == [s.to_dict() for s in qa]


def test_skill_asset_matches_code():
    saved = json.loads((ROOT / "assets/demo_data/skill_tasks.json").read_text(encoding="utf-8"))
    for split in ("train", "test"):
        code = load_skill_tasks(split)
        assert {k: [tuple(p) for p in v[split]] for k, v in saved.items()} == code


def test_assets_are_small():
    files = [p for p in (ROOT / "assets/demo_data").iterdir()] + [ROOT / "assets/tokenizer.json"]
    assert sum(p.stat().st_size for p in files) < 5e6


def test_heldout_entities_never_appear_in_training(demo_test):
    test_names = {s.meta["entity"] for s in demo_test}
    assert len(test_names) == len(demo_test)  # one sample per entity
    train_world = build_world(random.Random(0), 300, "train")
    assert not test_names & {e.name for e in train_world.entities}
    # Every generated name word in the test split belongs to the held-out hash bucket ...
    for s in demo_test:
        for word in s.meta["entity"].split():
            if word not in ("Mount", "River", *COMPANY_SUFFIXES):
                assert name_split(word) == "test", word
    # ... so the training stream never contains one.
    text = "\n".join(render_concat(e) for e in itertools.islice(training_examples(0), 400))
    assert not [n for n in test_names if mentions(text, n)]


def test_retrieval_samples_need_their_gold_contexts(demo_test):
    assert len(demo_test) == 200 and all(isinstance(s, RetrievalSample) for s in demo_test)
    for s in demo_test:
        ids = s.context_ids
        assert 3 <= len(ids) <= 5 and 2 <= len(s.gold_ids) <= 4
        assert set(s.gold_ids) < set(ids)  # gold + at least one distractor
        gold = " ".join(t for cid, t in s.contexts if cid in s.gold_ids)
        distractors = [t for cid, t in s.contexts if cid not in s.gold_ids]
        values = s.meta["values"]
        assert len(values) >= 3
        for v in values:
            assert mentions(s.continuation, v)
            assert mentions(gold, v), (s.sample_id, v)
            assert not mentions(s.query, v), (s.sample_id, v)
            assert not any(mentions(d, v) for d in distractors), (s.sample_id, v)
        # every gold chunk contributes at least one restated value
        for cid, text in s.contexts:
            if cid in s.gold_ids:
                assert any(mentions(text, v) for v in values)
        # contexts are database chunks, and the entity is named in the query
        assert all(demo_test.database[cid] == text for cid, text in s.contexts)
        assert s.meta["entity"] in s.query


def test_some_distractors_share_query_words(demo_test):
    """Retrieval is not trivial: distractors often come from the same region as the query."""
    shared = 0
    for s in demo_test:
        region_words = set(s.query.split()) - set(s.meta["entity"].split())
        distractors = [t for cid, t in s.contexts if cid not in s.gold_ids]
        shared += any(w.istitle() and len(w) > 3 and w in d for w in region_words for d in distractors)
    assert shared > len(demo_test) // 4


def test_qa_samples_have_consistent_is_selected(demo_qa):
    assert len(demo_qa) == 200
    for s in demo_qa:
        assert s.kind == "qa" and 3 <= len(s.contexts) <= 5
        assert s.meta["is_selected"] == [int(cid in s.gold_ids) for cid in s.context_ids]
        assert sum(s.meta["is_selected"]) == 1
        (value,) = s.meta["values"]
        assert mentions(s.continuation, value) and not mentions(s.query, value)
        for cid, text in s.contexts:
            assert mentions(text, value) == (cid in s.gold_ids)
        assert s.query.startswith("Question: ") and s.query.endswith("\nAnswer:")


def test_generated_samples_satisfy_invariants_for_every_type():
    rng = random.Random(3)
    world = build_world(rng, 30, "train")
    assert {e.etype.name for e in world.entities} == set(ENTITY_TYPES)
    for i, e in enumerate(world.entities):
        assert len(e.etype.attributes) >= 5 and all(len(a.chunk) >= 3 for a in e.etype.attributes)
        for s in (retrieval_sample(world, e, rng, f"r{i}"), qa_sample(world, e, rng, f"q{i}")):
            gold = " ".join(t for cid, t in s.contexts if cid in s.gold_ids)
            assert all(mentions(gold, v) and not mentions(s.query, v) for v in s.meta["values"])


def test_templates_keep_values_verbatim():
    """Entity.fill capitalises a sentence's first letter, so a template may open with {v} only
    when the value is already capitalised (else "the X Sea" would become "The X Sea")."""
    rng = random.Random(0)
    for etype in ENTITY_TYPES.values():
        for attr in etype.attributes:
            assert len(attr.chunk) >= 3 and attr.restate and "{e}" in attr.question
            for template in (*attr.chunk, *attr.restate):
                assert "{v}" in template
                if template.startswith("{v}"):
                    assert all(draw_value(attr.kind, rng, "train")[0].isupper() for _ in range(20)), template


def test_render_concat_and_order():
    ex = {"kind": "retrieval", "contexts": ["A.", "B.", "C."], "query": "Q.", "continuation": " cont."}
    assert render_concat(ex) == "A.\n\nB.\n\nC.\n\nQ. cont."
    assert render_concat(ex, order=[2, 0, 1]) == "C.\n\nA.\n\nB.\n\nQ. cont."
    prefix, cont = render_parts(ex, order=[1, 0, 2])
    assert prefix + cont == render_concat(ex, [1, 0, 2]) and cont == " cont."
    assert render_concat({"contexts": [], "query": "Q.", "continuation": " c"}) == "Q. c"
    with pytest.raises(ValueError, match="permutation"):
        render_concat(ex, order=[0, 0, 1])
    with pytest.raises(ValueError, match="mix"):
        next(training_examples(0, mix={"retrieval": 1.0, "chat": 1.0}))


def test_training_stream_shapes():
    ex = list(itertools.islice(training_examples(1, mix={"retrieval": 1, "skill": 1}), 200))
    assert {e["kind"] for e in ex} == {"retrieval", "skill"}
    for e in ex:
        assert all(CONTEXT_SEP not in c for c in e["contexts"])  # the separator stays unambiguous
        if e["kind"] == "retrieval":
            assert 3 <= len(e["contexts"]) <= 5 and e["continuation"].startswith(" ")
        else:
            lines = [x for x in (CONTEXT_SEP.join(e["contexts"]) + "\n" + e["query"]).splitlines() if x]
            assert 2 <= len(lines) <= 33 and lines[-1].endswith(ARROW)
            assert all(f" {ARROW} " in line for line in lines[:-1])
    # contexts come in random order: gold chunks are not always first
    firsts = {e["contexts"][0] for e in ex if e["kind"] == "retrieval"}
    assert len(firsts) > 10


# ---- skills --------------------------------------------------------------------------------------


def test_skill_tasks():
    tasks = load_skill_tasks()
    base = [n for n in tasks if not n.endswith(SHUFFLED_SUFFIX)]
    assert len(base) >= 8
    for name in base:
        pairs = tasks[name]
        assert len(pairs) >= 40, name
        assert len({q for q, _ in pairs}) == len(pairs), f"{name} has duplicate questions"
        shuffled = tasks[name + SHUFFLED_SUFFIX]
        assert [q for q, _ in shuffled] == [q for q, _ in pairs]
        assert sorted(a for _, a in shuffled) == sorted(a for _, a in pairs)  # a permutation
        assert sum(a != b for (_, a), (_, b) in zip(shuffled, pairs)) > len(pairs) // 2
        train, test = load_skill_tasks("train")[name], load_skill_tasks("test")[name]
        assert not {q for q, _ in train} & {q for q, _ in test}
        assert sorted(train + test) == sorted(pairs) and len(test) >= 10
    assert ("Egypt", "Cairo") in tasks["country_capital"] and ("mouse", "mice") in tasks["singular_plural"]
    assert ("python", "P") in tasks["first_letter"] and ("fourteen", "fifteen") in tasks["counting"]
    with pytest.raises(ValueError, match="split"):
        load_skill_tasks("dev")


def test_skill_query_format():
    assert format_demos([("Egypt", "Cairo"), ("Poland", "Warsaw")]) == "Egypt → Cairo\nPoland → Warsaw\n"
    tasks = load_skill_tasks("train")
    prompt, answer = skill_query(tasks["antonym"], 5, random.Random(0))
    lines = prompt.split("\n")
    assert len(lines) == 6 and lines[-1].endswith(" →") and answer.startswith(" ")
    assert (lines[-1][: -len(" →")], answer[1:]) in tasks["antonym"]
    assert lines[-1] not in lines[:-1]
    test = load_skill_tasks("test")
    prompt, answer = skill_query(tasks["counting"], 32, random.Random(1), query_pairs=test["counting"])
    assert (prompt.split("\n")[-1][:-2], answer[1:]) in test["counting"]
    with pytest.raises(ValueError, match="k \\+ 1"):
        skill_query(tasks["antonym"], 1000, random.Random(0))


# ---- hub preprocessing ---------------------------------------------------------------------------

WIKI_ROWS = [
    "",
    " = Velmora = \n",
    "",
    " Velmora is a city in the north . It was founded in 1423 by the merchant Osric Dallen , who traded glass . \n",
    "",
    " = = History = = \n",
    "",
    " Short line . \n",
    " The river Quell runs through the centre of the old town and floods in every spring season . \n",
    " = Tarrix = \n",
    " Tarrix is a province with many small villages , old roads , wide rivers and quiet stone bridges . \n",
]


def test_wikitext_preprocessing_on_a_table():
    datasets = pytest.importorskip("datasets")
    table = datasets.Dataset.from_dict({"text": WIKI_ROWS})
    corpus = hub.wikitext_corpus(table, split="test", min_words=8)
    assert [s.meta["title"] for s in corpus] == ["Velmora", "Velmora", "Tarrix"]  # headings dropped
    assert all("=" not in s.query + s.continuation for s in corpus)
    for s, line in zip(corpus, [WIKI_ROWS[3], WIKI_ROWS[8], WIKI_ROWS[10]]):
        assert s.query + s.continuation == line.strip()
        n_q, n_c = len(s.query.split()), len(s.continuation.split())
        assert n_q == (n_q + n_c) // 2 and n_c - n_q in (0, 1)  # two equal halves by words
        assert s.continuation[0] == " " and s.contexts == [] and s.gold_ids == []
        # the database is every half; the sample's own halves are excluded for it
        assert set(s.exclude_ids) <= set(corpus.database)
        assert not set(s.exclude_ids) & set(corpus.retrievable(s))
    assert len(corpus.database) == 2 * len(corpus)
    assert "Short line ." not in corpus.database.values()
    articles = hub.wikitext_corpus([{"text": t} for t in WIKI_ROWS], unit="article", min_words=8)
    assert len(articles) == 2 and "Quell" in articles[0].continuation


def _marco_row(qid, wfa, selected, texts=None):
    texts = texts or [f"passage {qid}-{j}" for j in range(len(selected))]
    return {
        "query": f"question {qid}?",
        "query_id": qid,
        "query_type": "DESCRIPTION",
        "answers": ["short"],
        "wellFormedAnswers": wfa,
        "passages": {"is_selected": selected, "passage_text": texts, "url": [f"http://x/{j}" for j in range(len(selected))]},
    }


def test_msmarco_preprocessing_on_a_table():
    datasets = pytest.importorskip("datasets")
    rows = [
        _marco_row(1, ["The answer is one."], [0, 1, 0]),
        _marco_row(2, [], [1, 0]),  # no well-formed answer
        _marco_row(3, ["No Answer Present."], [1, 0]),
        _marco_row(4, ["The answer is four."], [0, 0, 0]),  # no selected passage
        _marco_row(5, ["Five."], [1, 1, 0]),
    ]
    table = datasets.Dataset.from_list(rows)
    corpus = hub.msmarco_corpus(table, split="validation")
    assert [s.meta["query_id"] for s in corpus] == [1, 5]
    s1, s5 = corpus.samples
    assert s1.query == "Question: question 1?\nAnswer:" and s1.continuation == " The answer is one."
    assert s1.gold_ids == [s1.context_ids[1]] and s5.gold_ids == s5.context_ids[:2]
    assert s1.meta["is_selected"] == [0, 1, 0] and s1.kind == "qa"
    assert s1.context_texts == ["passage 1-0", "passage 1-1", "passage 1-2"]
    assert set(corpus.database) == set(s1.context_ids) | set(s5.context_ids)
    with pytest.raises(ValueError, match="is_selected"):
        hub.msmarco_corpus([_marco_row(9, ["x"], [1, 0], texts=["only one"])])


@pytest.mark.parametrize("name", ["wikitext", "msmarco"])
def test_hub_corpus_fails_fast_offline(name, monkeypatch):
    # A repo that no cache can hold, so the test never depends on (or triggers) a download.
    monkeypatch.setattr(hub, "WIKITEXT_REPO", "picaso-explorer-tests/no-such-dataset")
    monkeypatch.setattr(hub, "MSMARCO_REPO", "picaso-explorer-tests/no-such-dataset")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="demo"):
        load_corpus(name, split="validation")
    assert time.monotonic() - start < 5


def test_hub_corpus_fails_fast_without_network(monkeypatch):
    """Not in offline mode: one short metadata request decides (404 online, connect error here)."""
    monkeypatch.setattr(hub, "WIKITEXT_REPO", "picaso-explorer-tests/no-such-dataset")
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="demo"):
        load_corpus("wikitext", split="test")
    assert time.monotonic() - start < HUB_TIMEOUT_S + 5


# ---- loaders and bad input -----------------------------------------------------------------------


def test_load_corpus_demo(demo_test):
    assert demo_test.name == "demo" and demo_test.split == "test"
    train = load_corpus("demo", split="train")
    assert {s.meta["entity"] for s in train}.isdisjoint({s.meta["entity"] for s in demo_test})
    assert set(demo_test.database).isdisjoint(train.database)


def test_jsonl_round_trip(tmp_path, demo_test, demo_qa):
    path = tmp_path / "mine.jsonl"
    samples = demo_test.samples[:5] + demo_qa.samples[:5]
    write_samples(samples, path)
    corpus = load_corpus(str(path))
    assert corpus.samples == samples
    assert set(corpus.database) == {cid for s in samples for cid in s.context_ids}
    # the documented short forms: bare-string contexts, "answer" instead of "continuation"
    path.write_text(json.dumps({"query": "Q?", "answer": "A.", "contexts": ["c0 text", "c1 text"], "gold_ids": ["x-1"], "sample_id": "x"}) + "\n\n")
    (s,) = load_jsonl(path).samples
    assert s.continuation == " A." and s.context_ids == ["x-0", "x-1"] and s.gold_ids == ["x-1"]


@pytest.mark.parametrize(
    "line, message",
    [
        ('{"query": "q", "continuation": " c"', "not valid JSON"),
        ('["a list"]', "expected a JSON object"),
        ('{"continuation": " c"}', "query"),
        ('{"query": "q", "continuation": " c", "contexts": [["a", "t"]], "gold_ids": ["b"]}', "gold ids"),
        ('{"query": "q", "continuation": " c", "kind": "chat"}', "kind"),
        ('{"query": "q", "continuation": " c", "contexts": [["a", "t"], ["a", "u"]]}', "duplicate"),
    ],
)
def test_malformed_jsonl_names_the_line(tmp_path, line, message):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"query": "fine", "continuation": " yes"}\n' + line + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=message) as err:
        load_corpus(str(path))
    assert "bad.jsonl:2" in str(err.value)


def test_bad_corpus_arguments():
    with pytest.raises(ValueError, match="unknown corpus"):
        load_corpus("wikipedia")
    with pytest.raises(ValueError, match="split"):
        load_corpus("demo", split="validation")
    with pytest.raises(ValueError, match="kind"):
        load_corpus("demo", split="test", kind="skill")
    with pytest.raises(ValueError, match="only 'qa'"):
        load_corpus("msmarco", kind="retrieval")
    with pytest.raises(ValueError, match="split"):
        load_corpus("wikitext", split="dev")
    with pytest.raises(ValueError, match="no such"):
        load_corpus("/nonexistent/file.jsonl")


def test_continuations_copy_their_gold_chunks_and_paraphrase_does_not():
    """The demo continuation restates each fact in its gold chunk's own words, so a model that
    copies from context can predict it; the paraphrase variant words facts differently."""
    import random
    import re

    from picaso_core.data.demo_world import build_world, retrieval_sample

    world = build_world(random.Random(5), 12, "test")
    verbatim = paraphrased = 0
    for i, ent in enumerate(world.entities[:8]):
        s = retrieval_sample(world, ent, random.Random(i), f"s{i}")
        gold = [t for cid, t in s.contexts if cid in s.gold_ids]
        for sentence in re.split(r"(?<=\.) ", s.continuation.strip()):
            assert any(sentence in g for g in gold), sentence
            verbatim += 1
        p = retrieval_sample(world, ent, random.Random(i), f"p{i}", paraphrase=True)
        gold_p = [t for cid, t in p.contexts if cid in p.gold_ids]
        paraphrased += sum(not any(x in g for g in gold_p) for x in re.split(r"(?<=\.) ", p.continuation.strip()))
    assert verbatim >= 24 and paraphrased > 0


# ---- knowledge passages (demo model v2: the model knows every mapping, demonstrations use train items)


def _mentions(text: str, q: str, a: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(q)}(?![\w-])", text) is not None and \
        re.search(rf"(?<![\w-]){re.escape(a)}(?![\w-])", text) is not None


def test_every_test_item_is_stated_in_the_knowledge_passages_and_never_demonstrated():
    from picaso_core.data.knowledge import all_knowledge_passages

    passages = all_knowledge_passages()
    test = load_skill_tasks("test", include_shuffled=False)
    for task, pairs in test.items():
        for q, a in pairs:
            assert any(_mentions(p, q, a) for p in passages), (task, q, a)
    # the training stream: knowledge examples state test items too, skill demonstrations never do
    stream = list(itertools.islice(training_examples(0, mix=MIXES["v2"]), 1500))
    knowledge = [render_concat(e) for e in stream if e["kind"] == "knowledge"]
    skills = [e for e in stream if e["kind"] == "skill"]
    assert len(knowledge) > 400 and len(skills) > 300
    stated = {(t, q) for t, pairs in test.items() for q, a in pairs if any(_mentions(k, q, a) for k in knowledge)}
    assert len(stated) > 0.9 * sum(len(p) for p in test.values())  # random passages cover nearly all
    demo_lines: dict[str, set[str]] = {}  # task -> every demonstration / query line of its examples
    for e in skills:
        text = CONTEXT_SEP.join(e["contexts"]) + "\n" + e["query"] + e["continuation"]
        demo_lines.setdefault(e["task"], set()).update(x for x in text.splitlines() if ARROW in x)
    assert set(demo_lines) == set(test)
    for task, pairs in test.items():  # (a word may be a test item of one task and a train item of another)
        for q, a in pairs:
            assert f"{q} {ARROW} {a}" not in demo_lines[task], (task, q)
            assert not any(line.startswith(f"{q} {ARROW}") for line in demo_lines[task]), (task, q)
    assert not any(ARROW in k for k in knowledge)  # the demonstration format is not used for facts


def test_knowledge_passages_are_deterministic_and_vary_their_wording():
    from picaso_core.data.knowledge import knowledge_passage

    a = [knowledge_passage(random.Random(3)) for _ in range(1)]
    assert a == [knowledge_passage(random.Random(3))]
    texts = [render_concat(knowledge_passage(random.Random(i))) for i in range(300)]
    capitals = [t for t in texts if "capital" in t.lower()]
    assert len({t.split(".")[1].strip().split(" ")[0] for t in capitals}) > 3  # several sentence shapes
