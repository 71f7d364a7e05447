"""Nothing left behind, nothing unbounded, no server path (issue 47, item 4; issue 48, item 6's exports):
exports are written under <cache>/exports and gone after PICASO_EXPORT_TTL_S (2 s in the suite's app),
capped before anything is written, named after the tab, the example and the date; a malformed export
or Copy link payload gets one line and nothing in the log; an upload over --max-upload-mb (5 in the
suite's app) is refused and its bytes not kept; no reply names a server path; the header names a
model folder, not its path."""

from __future__ import annotations

import json
import time
import uuid
from datetime import date
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import pandas as pd
import pytest
import requests
from conftest import tracebacks

from picaso_core.session import public_model_name
from picaso_core.ui.tour.downloads import Exports, _export_choices, export_files, file_stem
from picaso_core.ui.tour.links import raw_value

TTL_S = 2.0  # PICASO_EXPORT_TTL_S in conftest.HOSTILE_ENV
TABLE = {"headers": ["Method", "Loss"], "data": [["Concat", 0.489], ["PICASO-R", 0.686]]}


# ---- without the app ------------------------------------------------------------------------------
def test_exports_are_swept_after_their_ttl_and_all_at_start(tmp_path):
    store = Exports(tmp_path / "exports", ttl_s=0.5)
    paths = [export_files(None, "compose", "table:0", [], [TABLE], None, store=store)[0] for _ in range(3)]
    assert all(Path(p).is_file() for p in paths) and len(list(store.folder.iterdir())) == 3
    assert store.sweep() == 0  # younger than the TTL: kept
    time.sleep(0.7)
    assert store.sweep() == 3 and list(store.folder.iterdir()) == []
    (store.folder / "left-by-a-previous-run").mkdir()
    Exports(store.folder, ttl_s=600).sweep(everything=True)  # what start() does first
    assert list(store.folder.iterdir()) == []


def test_an_export_over_the_cap_is_refused_in_one_line_before_anything_is_written(tmp_path):
    store = Exports(tmp_path / "exports", max_bytes=2_000)
    big = {"headers": ["text"], "data": [["x" * 100] for _ in range(100)]}  # ~10 kB of CSV
    with pytest.raises(gr.Error) as e:
        export_files(None, "compose", "table:0", [], [big], None, store=store)
    assert "over the" in e.value.message and "\n" not in e.value.message
    assert not store.folder.exists() or list(store.folder.iterdir()) == []
    [small] = export_files(None, "compose", "table:0", [], [TABLE], None, store=store)  # under the cap: written
    assert pd.read_csv(small)["Loss"].tolist() == [0.489, 0.686]


def test_export_names_carry_the_tab_the_example_and_the_date(tmp_path):
    store = Exports(tmp_path / "exports")
    [path] = export_files(None, "compose", "table:0", [], [TABLE], None, "demo-test-r0003", store, "methods")
    today = date.today().isoformat()
    assert Path(path).name == f"picaso-compose-demo-test-r0003-{today}-table-methods.csv"
    assert file_stem("coffee") == f"picaso-coffee-{today}"
    assert file_stem("compose", "../../etc/pass wd") == f"picaso-compose-etc-pass-wd-{today}"  # no path from a client


def test_the_projector_export_states_its_size_before_the_download():
    config = SimpleNamespace(state_shapes=lambda: {"ssm": (4, 16, 32, 64), "conv": (4, 640, 3)})
    res = SimpleNamespace(model=SimpleNamespace(config=config))
    label = dict((v, k) for k, v in _export_choices("soup", [], [], res))["projector"]
    # 20 tasks x 12 demonstrations x 16*32*64 features x 12 bytes: the demo's 93 MB map
    assert "about 94.4 MB" in label, label


def test_a_model_folder_is_named_by_its_name_not_its_path(tmp_path, res, tiny_model_dir):
    folder = tmp_path / "runs" / "my_checkpoint"
    folder.mkdir(parents=True)
    assert public_model_name(str(folder)) == "my_checkpoint"
    assert public_model_name(f"{folder}/") == "my_checkpoint"
    assert public_model_name("state-spaces/mamba2-370m") == "state-spaces/mamba2-370m"  # a hub id stays
    assert public_model_name("demo") == "demo"
    # what the header, the snippets and the tabs' replies read
    assert res.model_name == tiny_model_dir.name and str(tiny_model_dir) not in res.describe()


def test_copy_links_raw_values_are_checked_against_their_inputs():
    slider, box = gr.Slider(1, 10, render=False), gr.Checkbox(render=False)
    menu = gr.Dropdown(["a", "b"], render=False)
    assert raw_value(slider, 5) == 5 and raw_value(box, True) is True and raw_value(menu, "b") == "b"
    for comp, bad in ((slider, "5"), (slider, 11), (slider, True), (box, "true"), (menu, "c"), (menu, {"x": 1}),
                      (gr.Textbox(render=False), "x" * 5000)):
        with pytest.raises(ValueError):
            raw_value(comp, bad)


# ---- the suite's app -------------------------------------------------------------------------------
def _call(url: str, fn_index: int, data: list, timeout: float = 60) -> tuple[bool, dict]:
    """One queued call of an event by its index, as a hostile client makes it: (success, output)."""
    session = uuid.uuid4().hex[:10]
    r = requests.post(f"{url}gradio_api/queue/join", timeout=timeout,
                      json={"data": data, "fn_index": fn_index, "session_hash": session})
    r.raise_for_status()
    with requests.get(f"{url}gradio_api/queue/data?session_hash={session}", stream=True, timeout=timeout) as s:
        for line in s.iter_lines(decode_unicode=True):
            if line.startswith("data:") and (msg := json.loads(line[5:])).get("msg") == "process_completed":
                return msg.get("success"), msg.get("output")
    raise AssertionError("no result")


def _event(config: dict, output_elem_id: str) -> dict:
    """The server event that fills the component `output_elem_id` (its dependency in /config)."""
    ids = {c["id"]: c.get("props", {}).get("elem_id") for c in config["components"]}
    return next(d for d in config["dependencies"] if any(ids.get(o) == output_elem_id for o in d["outputs"])
                and d.get("backend_fn"))


def _compose_table_payload(config: dict, run: dict) -> dict:
    """What the page packs for the Compose tab's Export of its first table: the packing (js) event's
    inputs are the menu, the example, the tab's plots and tables; the table's value is TABLE."""
    pack = next(d for d in config["dependencies"] if d["outputs"] == run["inputs"] and not d.get("backend_fn"))
    types = {c["id"]: c["type"] for c in config["components"]}
    kinds = [types[i] for i in pack["inputs"][2:]]
    values = [None] * len(kinds)
    values[kinds.index("dataframe")] = TABLE
    return {"which": "table:0", "example": "demo-test-r0003", "values": values}


@pytest.fixture(scope="module")
def served(hostile_app):
    """The suite's app and every reply the tests below collect (checked for server paths last)."""
    config = requests.get(f"{hostile_app}config", timeout=30).json()
    run = _event(config, "compose-export-files")
    return SimpleNamespace(url=hostile_app, config=config, replies=[json.dumps(config)], export=run["id"],
                           payload=_compose_table_payload(config, run), copy=_event(config, "copy-link-url"))


def test_twenty_exports_leave_nothing_behind_after_the_cleanup_interval(served):
    url, tmp = served.url, served.url.tmp
    links = []
    for _ in range(20):
        ok, out = _call(url, served.export, [served.payload])
        assert ok, out
        served.replies.append(json.dumps(out))
        links += [a.split('"')[0] for a in out["data"][0].split('href="')[1:]]
    assert len(links) == 20 and all(Path(h).name.startswith("picaso-compose-demo-test-r0003-") for h in links)
    first = requests.get(f"{url}{links[-1]}", timeout=30)
    assert first.status_code == 200 and first.text.startswith("Method,Loss")  # served while it is kept
    assert len(list((tmp / "cache" / "exports").iterdir())) >= 1
    time.sleep(TTL_S + max(0.5, TTL_S / 2) + 2)  # the TTL, the sweep's interval, headroom on a busy machine
    assert list((tmp / "cache" / "exports").iterdir()) == []
    assert not list((tmp / "tmp").glob("picaso-*")), "an export folder in the system temp folder"
    assert not list((tmp / "tmp").rglob("picaso-compose-*")), "a copy of an export in Gradio's temp folder"
    gone = requests.get(f"{url}{links[-1]}", timeout=30)
    assert gone.status_code == 404 and "expired" in gone.text and gone.text.count("\n") <= 1
    served.replies.append(gone.text)


def test_malformed_export_and_copy_link_payloads_get_one_line_and_nothing_in_the_log(served):
    before = len(served.url.read_log())
    bad = [[None], ["x"], [{"which": "table:0", "values": 3}], [{"which": ["a"], "values": []}],
           [{"which": "table:0", "values": [None, {"headers": ["a", "b"], "data": [[1], [2, {"z": 1}]]}, None]}],
           [{"which": "plot:0", "values": [{"plot": "{not json"}, None, None]}]]
    n_copy = len(served.copy["inputs"])
    copies = [[None] + [3] * (n_copy - 1), [None] + [{"x": 1}] * (n_copy - 1), [None] + ["a" * 10] * (n_copy - 1)]
    for fn, data in [(served.export, d) for d in bad] + [(served.copy["id"], d) for d in copies]:
        ok, out = _call(served.url, fn, data)
        assert not ok and out["error"] and "\n" not in out["error"] and len(out["error"]) < 300, out
        served.replies.append(json.dumps(out))
    log = served.url.read_log()[before:]
    assert not tracebacks(log), log[-3000:]


def test_an_upload_over_the_limit_is_refused_and_not_kept(served):
    url, uploads = served.url, served.url.tmp / "tmp"
    r = requests.post(f"{url}gradio_api/upload", files={"files": ("big.bin", b"\0" * (50 * 2**20))}, timeout=120)
    assert r.status_code == 413 and "maximum allowed size" in r.text and "\n" not in r.text.strip()
    served.replies.append(r.text)
    kept = [p for p in uploads.rglob("*") if p.is_file() and p.stat().st_size > 2**20]
    assert not kept, kept


def test_an_upload_under_the_limit_is_named_without_its_server_folder(served):
    r = requests.post(f"{served.url}gradio_api/upload", files={"files": ("small.txt", b"hello")}, timeout=60)
    assert r.status_code == 200, r.text
    names = r.json()
    assert len(names) == 1 and names[0].endswith("/small.txt") and not names[0].startswith("/"), names
    served.replies.append(r.text)  # test_no_reply_names_a_server_path looks in it too


def test_no_reply_names_a_server_path(served):
    """Last in the module: every reply collected above, and the API's description."""
    served.replies.append(requests.get(f"{served.url}gradio_api/info", timeout=30).text)
    served.replies.append(requests.get(served.url, timeout=30).text)
    where = str(served.url.tmp)
    assert len(served.replies) > 20
    assert not [r[:200] for r in served.replies if where in r]


def test_the_served_header_names_the_model_folder_not_its_path(app_url, tiny_model_dir):
    """An app started with --model <a folder>: its page and /config name the folder only."""
    config = requests.get(f"{app_url}config", timeout=30).text
    page = requests.get(app_url, timeout=30).text
    assert str(tiny_model_dir) not in config and str(tiny_model_dir) not in page
    assert f"model **{tiny_model_dir.name}**" in config
