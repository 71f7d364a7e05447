"""The Fine-tuning tab and the shipped fine-tuned model: the shipped report and figures, the live
fine-tune handler (no server: progress, one run at a time, cancel, compare), /finetune and
/finetune_cancel through gradio_client, and the model choice of Compose & compare."""

from __future__ import annotations

import gradio as gr
import pytest

from picaso_core.engine.loading import load_model
from picaso_core.session import tuned_resources
from picaso_core.ui.tabs import compose as compose_tab
from picaso_core.ui.tabs import finetune as T


def test_the_shipped_fine_tuned_model_loads_by_name_with_its_card_and_report():
    assert (T.TUNED_DIR / "README.md").is_file(), f"missing: {T.TUNED_COMMAND}"
    size = sum(f.stat().st_size for f in T.TUNED_DIR.iterdir())
    assert size < 30e6
    tuned, base = load_model("demo-bptc"), load_model("demo")
    assert tuned.config == base.config and tuned.fingerprint() != base.fingerprint()
    report, history = T.load_shipped()
    assert {"base", "bptc-retrieval"} <= set(report["models"]) and len(history) >= 10
    assert report["models"]["base"]["gap"]["k"] == 5
    assert list(T.table1_frame(report)["Model"])[0] == "Base"
    assert "Look at" in T.intro(report)
    fig = T.PF.loss_vs_k_before_after(report["models"])
    assert {"Concat, base", "PICASO-R, BPTC"} <= {t.name for t in fig.data}


def test_live_fine_tune_reports_each_step_then_compares(res):  # noqa: F811
    before = {k: v.clone() for k, v in res.model.state_dict().items()}
    steps = list(T.run_live(res, "bptc", steps=3, k_max=3, lr=1e-3, poll_s=0.05))
    status, curve, bars, data, py, cl = steps[-1]
    assert data["steps"] == 3 and [h["step"] for h in data["history"]] == [1, 2, 3]
    assert set(data["compare"]) == {"base", "tuned"} and set(data["compare"]["base"]) == set(T.COMPARE_METHODS)
    assert "Done" in status and len(bars.data) == 2 and "api_name='/finetune'" in cl and "FT.train" in py
    for k, v in res.model.state_dict().items():  # the app's model is untouched: a copy was trained
        assert (v == before[k]).all(), k


def test_one_live_run_at_a_time_and_cancel(res):  # noqa: F811
    assert T.cancel() == "No live fine-tune is running."
    gen = T.run_live(res, "bp2c", steps=T.MAX_STEPS, k_max=2, lr=1e-3, poll_s=0.05)
    first = next(gen)  # the run holds the app-wide lock now
    assert "step" in first[0]
    with pytest.raises(gr.Error, match="already running"):
        next(T.run_live(res, "bptc", steps=2, k_max=2, lr=1e-3))
    assert "Cancelling" in T.cancel()
    *_, last = gen
    assert "Cancelled" in last[0] and last[3]["cancelled"] and last[3]["steps"] < T.MAX_STEPS
    assert not T._RUN_LOCK.locked()


@pytest.mark.parametrize("kw, message", [(dict(objective="adam"), "objective"), (dict(steps=0), "steps"),
                                         (dict(steps=T.MAX_STEPS + 1), "steps"), (dict(k_max=11), "k_max"),
                                         (dict(lr="fast"), "learning rate")])
def test_live_fine_tune_rejects_bad_input(res, kw, message):  # noqa: F811
    args = dict(objective="bptc", steps=2, k_max=2, lr=1e-3) | kw
    with pytest.raises(gr.Error, match=message):
        next(T.run_live(res, **args))


def test_finetune_endpoints_through_gradio_client(app_url):  # noqa: F811
    from gradio_client import Client

    client = Client(app_url, verbose=False)
    named = client.view_api(return_format="dict", print_info=False)["named_endpoints"]
    assert {"/finetune", "/finetune_cancel"} <= set(named)
    assert not any(r["label"].startswith("value_") for r in named["/finetune"]["returns"])
    out = client.predict(objective="bptc", steps=2, k_max=2, lr=1e-3, api_name="/finetune")
    assert out[3]["steps"] == 2 and "tuned" in out[3]["compare"]
    assert client.predict(api_name="/finetune_cancel") == "No live fine-tune is running."
    with pytest.raises(Exception, match="objective"):
        client.predict(objective="sgd", steps=2, k_max=2, lr=1e-3, api_name="/finetune")


def test_compose_rejects_an_unknown_model_and_the_tuned_model_needs_the_demo(res):  # noqa: F811
    s = res.corpus.samples[0]
    with pytest.raises(gr.Error, match="model must be"):
        compose_tab.compose(res, s.query, s.continuation, 2, model="large")
    with pytest.raises(gr.Error, match="--model demo"):
        compose_tab.compose(res, s.query, s.continuation, 2, model="bptc")


@pytest.fixture(scope="module")
def demo_res(tmp_path_factory):
    from picaso_core.session import load_resources

    return load_resources("demo", "demo", cache_dir=tmp_path_factory.mktemp("cache"), log=lambda m: None)


def test_compose_with_the_fine_tuned_model_uses_its_own_states(demo_res):
    s = demo_res.corpus.samples[0]
    outs = {m: compose_tab.compose(demo_res, s.query, s.continuation, 3, max_new_tokens=0, example=s.sample_id,
                                   model=m) for m in ("base", "bptc")}
    base, tuned = outs["base"][6], outs["bptc"][6]
    assert base["model"] == "demo" and tuned["model"] == "demo-bptc"
    assert [c["id"] for c in base["contexts"]] == [c["id"] for c in tuned["contexts"]]  # same retrieval
    assert base["methods"]["picaso_r"]["loss"] != tuned["methods"]["picaso_r"]["loss"]
    assert "model='bptc'" in outs["bptc"][8] and "demo-bptc" in outs["bptc"][7]
    tuned_res = tuned_resources(demo_res)
    assert tuned_res.store.folder != demo_res.store.folder and tuned_res.retriever is demo_res.retriever


def test_browser_fine_tuning_tab_shows_the_shipped_figures_and_runs_live(browser, app_url):  # noqa: F811
    import os
    import tempfile
    from pathlib import Path

    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(app_url)
    wait = WebDriverWait(browser, 90)
    tab = wait.until(lambda d: [b for b in d.find_elements(By.CSS_SELECTOR, "button[role=tab]") if b.text == T.TITLE])
    tabs = [b.text for b in browser.find_elements(By.CSS_SELECTOR, "button[role=tab]")]
    assert tabs.index(T.TITLE) == tabs.index("Benchmarks") + 1  # right after Benchmarks (talk order)
    tab[0].click()
    assert wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#ft-fig4 .js-plotly-plot"))
    assert "BPTC" in browser.find_element(By.ID, "ft-intro").text
    start = browser.find_element(By.ID, "ft-start")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", start)
    start.click()
    WebDriverWait(browser, 300).until(lambda d: "Done" in d.find_element(By.ID, "ft-status").text)
    assert wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#ft-compare .js-plotly-plot"))
    shots = Path(os.environ.get("PICASO_SCREENSHOT_DIR", tempfile.gettempdir()))
    browser.save_screenshot(str(shots / "picaso_finetune_tab.png"))
