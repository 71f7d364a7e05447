"""Users' corpora, every way a file can be wrong: one line with the file, the line number and the fix
from the loader and from each entry point (app start, the store CLI, the experiments CLI), no
traceback; a BOM and CRLF line ends are accepted; a field of the wrong shape is refused, never
reinterpreted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from picaso_core.data import CorpusError, load_corpus
from picaso_core.data.jsonl import MAX_LINE_BYTES
from conftest import exit_line

OK = {"sample_id": "s0", "query": "Velmora was founded by", "continuation": " Osric Dallen.",
      "contexts": [["c1", "Velmora was founded by Osric Dallen."], ["c2", "Its river is the Quell."]]}
OK_LINE = json.dumps(OK).encode()


def line(**fields) -> bytes:
    return json.dumps({"query": "q", "continuation": " c", **fields}).encode()


# name -> (file bytes, the line an error names (None: the file as a whole), words the message holds)
BAD = {
    "broken JSON": (OK_LINE + b"\n" + b'{"query": "q", "continuation": " c"\n', 2, "not valid JSON"),
    "a list, not an object": (OK_LINE + b'\n["a list"]\n', 2, "expected a JSON object, got a list"),
    "query a number": (OK_LINE + b"\n" + line(query=5) + b"\n", 2, "field 'query' must be a string, got a number"),
    "continuation null": (OK_LINE + b"\n" + line(continuation=None) + b"\n", 2, "'continuation' must be a string"),
    "missing query": (OK_LINE + b'\n{"continuation": " c"}\n', 2, "missing required field 'query'"),
    "contexts an object": (OK_LINE + b"\n" + line(contexts={"a": "text a", "b": "text b"}) + b"\n", 2,
                           "field 'contexts' must be a list of [id, text] pairs, got an object"),
    "a context of three items": (OK_LINE + b"\n" + line(contexts=[["a", "t", "x"]]) + b"\n", 2, "context 0 must be"),
    "a context id a number": (OK_LINE + b"\n" + line(contexts=[[7, "t"]]) + b"\n", 2, "context 0 must be"),
    "gold_ids a string": (OK_LINE + b"\n" + line(contexts=[["a", "t"]], gold_ids="a") + b"\n", 2,
                          "'gold_ids' must be a list"),
    "gold id not a context": (OK_LINE + b"\n" + line(gold_ids=["zz"]) + b"\n", 2, "not among its contexts"),
    "kind unknown": (OK_LINE + b"\n" + line(kind="chat") + b"\n", 2, "'kind' must be one of"),
    "duplicate sample_id": (OK_LINE + b"\n" + OK_LINE + b"\n", 2, "duplicate sample_id 's0'"),
    "two texts for one id": (OK_LINE + b"\n" + line(contexts=[["c1", "another text"]]) + b"\n", 2,
                             "two different texts"),
    "binary bytes": (OK_LINE + b"\n" + bytes(range(128, 256)) * 2 + b"\n", 2, "is not UTF-8 text (byte 0x80"),
    "a huge line": (OK_LINE + b"\n" + b'{"query": "' + b"x" * MAX_LINE_BYTES + b'"}\n', 2, "is longer than 16 MiB"),
    "empty": (b"", None, "is empty"),
    "blank lines only": (b"\n  \n\r\n", None, "is empty"),
    "no contexts anywhere": (line() + b"\n", None, "no contexts to retrieve from"),
}


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("bad_corpora")
    files = {}
    for i, (name, (data, _, _)) in enumerate(BAD.items()):
        files[name] = folder / f"bad{i}.jsonl"
        files[name].write_bytes(data)
    files["missing path"] = folder / "nowhere.jsonl"
    files["a folder"] = folder / "a_folder"
    files["a folder"].mkdir()
    return files


EXPECT = {**{name: (ln, words) for name, (_, ln, words) in BAD.items()},
          "missing path": (None, "no such .jsonl file"), "a folder": (None, "is a folder, not a .jsonl file")}


def assert_names(message: str, path: Path, name: str) -> None:
    ln, words = EXPECT[name]
    where = f"{path}:{ln}: " if ln else f"{path}: "
    assert message.startswith(where) or message.startswith("error: " + where), message
    assert words in message and "; " in message.split(words, 1)[1] + message.split(words, 1)[0], message  # a fix
    assert "\n" not in message and "Traceback" not in message


@pytest.mark.parametrize("name", list(EXPECT))
def test_the_loader_names_file_line_and_fix(bad_files, name):
    if name == "no contexts anywhere":  # a valid file: the app refuses it (below), a loader need not
        assert load_corpus(str(bad_files[name])).database == {}
        return
    with pytest.raises(CorpusError) as e:
        load_corpus(str(bad_files[name]))
    assert_names(str(e.value), bad_files[name], name)


@pytest.mark.parametrize("name", ["broken JSON", "contexts an object", "binary bytes", "empty", "missing path",
                                  "a folder", "no contexts anywhere", "query a number"])
def test_every_entry_point_refuses_in_one_line(bad_files, name, tiny_model_dir, tmp_path, capsys,
                                               app_main, monkeypatch):  # noqa: F811
    from picaso_core import experiments
    from picaso_core.store.cli import main as store_main
    from conftest import BagOfWords

    path, model = str(bad_files[name]), str(tiny_model_dir)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    entries = {
        "app": lambda: app_main(["--model", model, "--corpus", path, "--cache-dir", str(tmp_path / "c")]),
        "store": lambda: store_main(["build", "--model", model, "--corpus", path, "--out", str(tmp_path / "s")]),
        "experiments": lambda: experiments.main(["--model", model, "--corpus", path, "--out", str(tmp_path / "o")],
                                                embedder=BagOfWords()),
    }
    for entry, fn in entries.items():
        if name == "no contexts anywhere" and entry != "app":
            continue  # a store of no contexts is empty, not wrong; the experiments need samples with contexts
        msg = exit_line(fn)
        assert_names(msg, bad_files[name], name)
        assert "Traceback" not in capsys.readouterr().err, entry


def test_a_bom_and_crlf_line_ends_are_accepted(tmp_path):
    plain = tmp_path / "plain.jsonl"
    plain.write_bytes(OK_LINE + b"\n" + line(sample_id="s1", contexts=[["c3", "t"]]) + b"\n")
    windows = tmp_path / "windows.jsonl"
    windows.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes().replace(b"\n", b"\r\n"))
    a, b = load_corpus(str(plain)), load_corpus(str(windows))
    assert a.samples == b.samples and a.database == b.database and len(a.samples) == 2
    assert b.samples[1].continuation == " c"  # no stray "\r"


def test_a_contexts_object_is_refused_not_read_as_its_ids(tmp_path):
    path = tmp_path / "obj.jsonl"
    path.write_bytes(line(contexts={"a": "text a"}) + b"\n")
    with pytest.raises(CorpusError, match="got an object"):
        load_corpus(str(path))


def test_the_documented_short_forms_still_load(tmp_path):
    path = tmp_path / "short.jsonl"
    path.write_bytes(json.dumps({"query": "Q?", "answer": "A.", "contexts": ["t0", {"id": "k", "text": "t1"}],
                                 "sample_id": "x"}).encode() + b"\n")
    (s,) = load_corpus(str(path)).samples
    assert s.continuation == " A." and s.contexts == [("x-0", "t0"), ("k", "t1")]
