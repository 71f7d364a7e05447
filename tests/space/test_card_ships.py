"""A prepared Space's card says what ships in its folder (issue 48, item 7): the ZeroGPU card names
`store/` only where `prepare --store` wrote one there, and otherwise says the Space encodes its
states when it starts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from picaso_core.space.prepare import prepare


@pytest.fixture
def source(tmp_path) -> Path:
    """A stand-in checkout: prepare copies these files as they are."""
    src = tmp_path / "checkout"
    (src / "picaso_core").mkdir(parents=True)
    (src / "assets").mkdir()
    (src / "app.py").write_text("")
    (src / "requirements.txt").write_text("torch==2.13.0\n")
    for name in ("Dockerfile", ".dockerignore"):
        (src / name).write_text("")
    return src


def card_text(out: Path) -> str:
    """The README's prose after the front matter."""
    return re.sub(r"^---\n.*?\n---\n", "", (out / "README.md").read_text(encoding="utf-8"), flags=re.S)


def says_store_ships(text: str) -> bool:
    return "ship in `store/`" in text


@pytest.mark.parametrize("with_store", [False, True])
def test_the_zerogpu_card_says_whether_states_ship_in_store(with_store, source, tmp_path):
    store = None
    if with_store:
        store = tmp_path / "prebuilt"
        store.mkdir()
        (store / "store.json").write_text("{}")
    out = prepare("zerogpu", tmp_path / "space", store=store, source=source)
    text = card_text(out)
    assert says_store_ships(text) == (out / "store" / "store.json").is_file() == with_store
    if not with_store:
        assert "No states ship" in text and "encodes every context's state" in text


@pytest.mark.parametrize("kind", ["docker", "static"])
def test_other_cards_claim_no_store_folder(kind, source, tmp_path):
    def export(out, app_url=None):
        (Path(out) / "index.html").write_text("<html></html>")

    out = prepare(kind, tmp_path / kind, source=source, export=export if kind == "static" else None)
    assert not says_store_ships(card_text(out)) and not (out / "store").exists()
