"""The Tokenizer wrapper: exact round trips, EOS handling, held-out coverage, fast hub failure."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models

from picaso_core.data import load_corpus
from picaso_core.engine.tokenizer import EOS_TOKEN, Tokenizer, train_bpe

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return Tokenizer.from_pretrained_dir(ROOT / "assets")


def test_demo_tokenizer_basics(tok):
    assert tok.vocab_size == 4096
    assert tok.eos_id == 0 and tok.decode([tok.eos_id]) == EOS_TOKEN
    assert tok.eos_id not in tok.encode("Velmora was founded in 1423.")  # no special tokens added
    assert tok.encode(EOS_TOKEN) == [tok.eos_id]  # but the literal marker maps to EOS
    assert all(0 <= i < tok.vocab_size for i in tok.encode("any text at all, ünïcödé 🙂"))


@pytest.mark.parametrize(
    "text",
    [
        "Velmora is a city in the northern province of Tarrix.\n\nIts river is the Quell.",
        "café — naïve façade, 日本語, Ελληνικά, emoji 🙂👍🏽",
        "line one\nline two\r\n\ttabbed  double  spaces   \n\n\n",
        "Egypt → Cairo\nPoland → Warsaw\nFrance →",
        "0123456789 1423 3.14159 -42 1,000,000",
        "",
        " leading and trailing spaces ",
    ],
)
def test_round_trip(tok, text):
    assert tok.decode(tok.encode(text)) == text


def test_round_trip_on_world_text(tok):
    corpus = load_corpus("demo", split="test")
    for s in corpus.samples[:50]:
        for text in (s.query, s.continuation, *s.context_texts):
            assert tok.decode(tok.encode(text)) == text


def test_arrow_and_digits(tok):
    # " →" is one learned piece (it starts every skill answer's line), digits are one per token
    assert len(tok.encode(" →")) == 1
    ids = tok.encode(" 1423")
    assert tok.token_strings(ids)[-4:] == ["1", "4", "2", "3"]
    assert tok.token_strings(tok.encode("Egypt → Cairo"))[-2:] == [" →", " Cairo"]


@pytest.mark.parametrize("task", ["antonym", "capitalize", "country_capital", "english_french",
                                  "present_past", "singular_plural"])
def test_skill_answers_tokenize_alike_in_both_splits(tok, task):
    """Held-out answers are as whole as the demonstrated ones. A tokenizer trained on
    demonstrations of train items only merged those answers into one piece and left held-out ones
    in 2-5 fragments (capitals: 83% vs 0% one-piece), and a model trained on one-piece answers
    after `→` ended its line after the first fragment (build_demo_data.TOKENIZER_MIX)."""
    from picaso_core.data.skills import load_skill_tasks

    def pieces(split):
        pairs = load_skill_tasks(split, include_shuffled=False)[task]
        return [len(tok.encode(" " + a)) for _, a in pairs]

    train, test = pieces("train"), pieces("test")
    one_piece = lambda n: sum(x == 1 for x in n) / len(n)  # noqa: E731
    assert one_piece(test) >= 0.7 and one_piece(train) >= 0.7, (one_piece(train), one_piece(test))
    assert abs(sum(train) / len(train) - sum(test) / len(test)) <= 0.35


def test_heldout_names_use_learned_pieces(tok):
    """The tokenizer saw only training names, yet held-out names split into syllable-sized
    pieces it knows, never into raw bytes."""
    corpus = load_corpus("demo", split="test")
    names = {s.meta["entity"].split()[0] for s in corpus if s.meta["type"] in ("city", "person")}
    assert len(names) > 50
    total = 0
    for name in names:
        pieces = tok.token_strings(tok.encode(" " + name))
        assert "".join(pieces) == " " + name
        assert all(p.strip().isalpha() for p in pieces), pieces
        total += len(pieces)
    assert total / len(names) <= 3.5  # about one piece per 2-3-letter syllable, not per letter


def test_encode_batch_matches_encode(tok):
    texts = ["one → two", "Mount Tarrix is 4821 metres high.", ""]
    assert tok.encode_batch(texts) == [tok.encode(t) for t in texts]


def test_train_bpe_is_deterministic():
    texts = ["Velmora was founded in 1423 by Osric Dallen.", "one → two\ntwo → three\n"] * 50
    a, b = train_bpe(texts, vocab_size=300), train_bpe(texts, vocab_size=300)
    assert a._tok.to_str() == b._tok.to_str()
    assert a.eos_id == 0 and a.decode(a.encode(texts[0])) == texts[0]


def test_loading_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="build_demo_data"):
        Tokenizer.from_file(tmp_path / "missing.json")
    with pytest.raises(FileNotFoundError, match="tokenizer.json"):
        Tokenizer.from_pretrained_dir(tmp_path)
    with pytest.raises(ValueError, match="EOS"):
        Tokenizer(HFTokenizer(models.BPE()))


def test_same_loading_path_for_any_tokenizer_json(tmp_path, tok):
    """A checkpoint folder with its own tokenizer.json loads exactly like the demo one."""
    (tmp_path / "tokenizer.json").write_text((ROOT / "assets/tokenizer.json").read_text(encoding="utf-8"), encoding="utf-8")
    other = Tokenizer.from_pretrained_dir(tmp_path)
    assert other.encode("Velmora → Tarrix") == tok.encode("Velmora → Tarrix")


def test_from_hub_fails_fast_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="from_pretrained_dir"):
        Tokenizer.from_hub("picaso-explorer-tests/no-such-tokenizer")
    assert time.monotonic() - start < 5


def test_from_hub_fails_fast_without_network(monkeypatch):
    """Not in offline mode: a short metadata probe fails (connect error here, 404 online)
    before hf_hub_download's retries could take tens of seconds."""
    import huggingface_hub.constants

    from picaso_core.engine.tokenizer import HUB_TIMEOUT_S

    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="demo model"):
        Tokenizer.from_hub("picaso-explorer-tests/no-such-tokenizer")
    assert time.monotonic() - start < HUB_TIMEOUT_S + 5


# ---- the end-of-text token comes from the checkpoint ---------------------------------------------
def _bpe(special: list[str]) -> HFTokenizer:
    """A small byte-level BPE whose only special tokens are `special` (ids 0, 1, ...)."""
    from tokenizers import decoders, pre_tokenizers, trainers

    hf = HFTokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    hf.train_from_iterator(["Velmora was founded in 1423 by Osric Dallen."] * 20, trainer)
    return hf


def _folder(tmp_path, special, **files) -> Path:
    import json

    _bpe(special).save(str(tmp_path / "tokenizer.json"))
    for name, content in files.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(content))
    return tmp_path


@pytest.mark.parametrize("files, source", [
    (dict(tokenizer_config={"eos_token": "</s>", "bos_token": "<s>"}), "tokenizer_config.json eos_token"),
    (dict(special_tokens_map={"eos_token": {"content": "</s>", "lstrip": False}}), "special_tokens_map.json eos_token"),
    (dict(config={"model_type": "mamba2", "eos_token_id": 2}), "config.json eos_token_id"),
    (dict(generation_config={"eos_token_id": [2, 1]}), "generation_config.json eos_token_id"),
    ({}, "tokenizer.json special token"),  # named by nothing: '</s>' by convention
])
def test_eos_is_the_one_the_checkpoint_names(tmp_path, files, source):
    tok = Tokenizer.from_pretrained_dir(_folder(tmp_path, ["<unk>", "<s>", "</s>"], **files))
    assert (tok.eos_token, tok.eos_id, tok.eos_source) == ("</s>", 2, source)
    assert tok.decode([tok.eos_id]) == "</s>" and "'</s>' (id 2" in repr(tok)


def test_config_json_wins_over_the_tokenizer_files(tmp_path):
    folder = _folder(tmp_path, ["<unk>", "<s>", "</s>"], config={"eos_token_id": 1},
                     tokenizer_config={"eos_token": "</s>"})
    assert Tokenizer.from_pretrained_dir(folder).eos_token == "<s>"


def test_no_eos_anywhere_loads_with_none_and_a_warning(tmp_path):
    folder = _folder(tmp_path, ["<unk>", "<pad>"], config={"d_model": 8})
    with pytest.warns(UserWarning, match="names no end-of-text token.*eos_token_id"):
        tok = Tokenizer.from_pretrained_dir(folder)
    assert tok.eos_id is None and tok.eos_token is None and "none found" in repr(tok)
    assert tok.decode(tok.encode("Velmora was founded")) == "Velmora was founded"


def test_an_eos_the_tokenizer_lacks_is_an_error_naming_the_file(tmp_path):
    folder = _folder(tmp_path, ["<unk>", "</s>"], config={"eos_token_id": 5000})
    with pytest.raises(ValueError, match=r"config\.json: eos_token_id 5000 .*fix eos_token_id"):
        Tokenizer.from_pretrained_dir(folder)
    (folder / "config.json").unlink()
    (folder / "tokenizer_config.json").write_text('{"eos_token": "<|im_end|>"}')
    with pytest.raises(ValueError, match=r"tokenizer_config\.json: eos_token '<\|im_end\|>'"):
        Tokenizer.from_pretrained_dir(folder)


def test_a_hub_tokenizer_takes_the_models_eos_first(tmp_path):
    """A state-spaces folder has no tokenizer.json: the shared one comes from the hub, and the
    model's own config.json, read first, names the EOS (from_hub's config_folder)."""
    hub, model_dir = tmp_path / "hub", tmp_path / "model"
    hub.mkdir(), model_dir.mkdir()
    _folder(hub, ["<unk>", "<s>", "</s>"], tokenizer_config={"eos_token": "</s>"})
    (model_dir / "config.json").write_text('{"eos_token_id": 1}')
    tok = Tokenizer.from_file(hub / "tokenizer.json", eos_folders=[model_dir, hub])
    assert tok.eos_token == "<s>" and tok.eos_source == "config.json eos_token_id"
    assert Tokenizer.from_file(hub / "tokenizer.json").eos_token == "</s>"
