"""Ten simultaneous /compose clients: each gets its own answer, none errs.

The model, store and retriever are shared read-only by the requests that the queue runs at once
(the model pool, --workers). Each client sends its own query; its answer must be the one a lone call
gives (same contexts, same losses, same generations), so no request sees another's data.
"""

from __future__ import annotations

import threading

import pytest

from picaso_core.ui.server import serving

CLIENTS = 10
QUERIES = [f"{subject} {verb}" for subject in ("Velmora", "Tarrix", "Brandor", "The mountain", "The company")
           for verb in ("was founded by", "is known for")]


def test_compose_event_runs_in_the_model_pool(tiny_model_dir, tmp_path):
    import app
    from picaso_core.session import load_resources
    from conftest import BagOfWords, write_corpus

    res = load_resources(str(tiny_model_dir), str(write_corpus(tmp_path / "facts.jsonl")), cache_dir=tmp_path / "c",
                         embedder=BagOfWords(), log=lambda msg: None)
    fn = next(f for f in app.build_app(res).fns.values() if f.api_name == "compose")
    # the app's one model pool, sized by the queue (--workers, picaso_core.ui.server.serving)
    assert fn.concurrency_id == serving.POOL and fn.concurrency_limit == "default"


def test_ten_concurrent_clients_each_get_their_own_answer(app_url):  # noqa: F811
    from gradio_client import Client

    assert len(QUERIES) == CLIENTS
    ask = dict(continuation=" in 1423.", k=3, max_new_tokens=4, api_name="/compose")
    clients = [Client(app_url, verbose=False) for _ in range(CLIENTS)]
    alone = {q: clients[0].predict(query=q, **ask)[6] for q in QUERIES}  # one at a time: the reference

    answers: dict[int, object] = {}
    start = threading.Barrier(CLIENTS)

    def call(i: int) -> None:
        start.wait()
        try:
            answers[i] = clients[i].predict(query=QUERIES[i], **ask)[6]
        except Exception as e:  # noqa: BLE001  (recorded and asserted below)
            answers[i] = e

    threads = [threading.Thread(target=call, args=(i,)) for i in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    errors = {i: a for i, a in answers.items() if isinstance(a, Exception)}
    assert len(answers) == CLIENTS and not errors, errors
    for i, q in enumerate(QUERIES):
        got, want = answers[i], alone[q]
        assert got["query"] == q
        assert [c["id"] for c in got["contexts"]] == [c["id"] for c in want["contexts"]]
        for m, r in want["methods"].items():
            assert got["methods"][m]["loss"] == pytest.approx(r["loss"], abs=1e-4), (q, m)
            assert got["methods"][m]["generation"] == r["generation"], (q, m)
