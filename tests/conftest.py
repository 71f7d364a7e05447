"""Shared fixtures: tiny random models of both families, a tiny tokenizer, a saved model folder.

Everything here is built by the tests themselves (no downloads) and small enough for 2 CPU cores.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from picaso_core import ModelConfig, SSMLanguageModel
from picaso_core.engine.rng import seeded

TINY_VOCAB = 320  # >= the tiny tokenizer's vocabulary below

TINY_SSM = {
    # ngroups=2 and a chunk shorter than most test sequences exercise the group and chunk paths
    "Mamba2": dict(layer="Mamba2", d_state=8, headdim=8, ngroups=2, chunk_size=8),
    "Mamba1": dict(layer="Mamba1", d_state=4),
}


def tiny_config(family: str = "Mamba2", vocab_size: int = TINY_VOCAB, n_layer: int = 2, ssm: dict | None = None,
                **kw) -> ModelConfig:
    """`ssm` overrides entries of the family's TINY_SSM (e.g. headdim=64, ngroups=1 for one Mamba-2 head)."""
    return ModelConfig(d_model=32, n_layer=n_layer, vocab_size=vocab_size,
                       ssm_cfg={**TINY_SSM[family], **(ssm or {})}, pad_vocab_size_multiple=8, **kw)


def tiny_model(family: str = "Mamba2", seed: int = 0, **kw) -> SSMLanguageModel:
    """A random tiny model with non-trivial decays (A_log, dt spread like a trained model)."""
    with seeded(seed):  # the same weights whatever a background thread of an earlier test draws
        model = SSMLanguageModel(tiny_config(family, **kw)).eval()
        after = torch.get_rng_state()
    torch.set_rng_state(after)  # a test's own draws after it go on from the seed, as with torch.manual_seed
    return model


@pytest.fixture(params=["Mamba2", "Mamba1"])
def family(request) -> str:
    return request.param


_TOKENIZER_TEXT = [
    "Velmora is a city in the northern province of Tarrix.",
    "Records show that Velmora was founded in 1423 by the merchant Osric Dallen.",
    "The main export of Velmora is blue glass, and its river is the Quell.",
    "cat → cats\ndog → dogs\nrun → ran\nhappy → sad\n",
    "A state space model reads tokens one at a time and keeps a fixed-size state.",
]


@pytest.fixture(scope="session")
def tokenizer_json(tmp_path_factory) -> Path:
    """A byte-level BPE tokenizer.json trained on a few sentences (vocabulary < TINY_VOCAB)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_TOKENIZER_TEXT * 4, trainer)
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tok.save(str(path))
    assert tok.get_vocab_size() <= TINY_VOCAB
    return path


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, tokenizer_json) -> Path:
    """A random tiny Mamba-2 saved in the mamba_ssm layout (config.json, model.safetensors,
    tokenizer.json): what `load_model(folder)` and `python app.py --model folder` read."""
    return save_model_dir(tiny_model("Mamba2", seed=1), tmp_path_factory.mktemp("tiny_model"), tokenizer_json)


def save_model_dir(model: SSMLanguageModel, folder: Path, tokenizer_json: Path) -> Path:
    """Write `model` into `folder` in the mamba_ssm layout, with the tiny tokenizer."""
    from safetensors.torch import save_file

    (folder / "config.json").write_text(json.dumps(model.config.to_dict()))
    sd = {k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    save_file(sd, str(folder / "model.safetensors"))
    (folder / "tokenizer.json").write_bytes(Path(tokenizer_json).read_bytes())
    return folder


def bare_resources(model, model_name: str, folder: Path, database: dict[str, str] | None = None):
    """The app's Resources with only what the soup lab reads: the model, a store folder (nothing
    stored), the cache folder above it and the corpus's database."""
    from types import SimpleNamespace

    from picaso_core.session import Resources

    return Resources(model, model_name, SimpleNamespace(database=database or {}), SimpleNamespace(folder=str(folder)),
                     None, 0, {}, Path(folder).parent)


# Browser tests: Gradio re-renders outputs, so an element found by a wait's condition can leave the page
# before the condition reads it. Every WebDriverWait then retries instead of failing on
# StaleElementReferenceException (a real failure still times out).
try:
    import selenium.webdriver.support.wait as _selenium_wait
    from selenium.common.exceptions import StaleElementReferenceException as _Stale

    if _Stale not in _selenium_wait.IGNORED_EXCEPTIONS:
        _selenium_wait.IGNORED_EXCEPTIONS = (*_selenium_wait.IGNORED_EXCEPTIONS, _Stale)
except ImportError:  # no selenium: the browser tests skip
    pass


@pytest.fixture(autouse=True)
def _background_work_ends_with_its_test():
    """What an app start leaves running in this process (the tour's build, the warm-up click, the
    allocator trim) is stopped when the test that started it ends: it would otherwise run on into
    later tests, taking the cores and, in the tour's COFFEE step, building models."""
    yield
    serving = sys.modules.get("picaso_core.ui.server.serving")  # loaded only by tests that use the app
    if serving is not None:
        left = serving.stop_background(timeout=120)
        assert not left, f"background threads still running 120 s after their test: {left}"
