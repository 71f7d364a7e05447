"""One tokenizer wrapper for every model: the bundled demo tokenizer and real checkpoints' ones.

Both are a Hugging Face `tokenizer.json` (the demo: byte-level BPE, 4096 pieces, trained by
scripts/build_demo_data.py; state-spaces Mamba checkpoints: GPT-NeoX-20B's). `encode` never adds
special tokens: the engine decides where EOS goes.

The end-of-text token comes from the checkpoint (`find_eos`): config.json's / generation_config.json's
`eos_token_id`, else tokenizer_config.json's / special_tokens_map.json's `eos_token`, else a special
token of tokenizer.json with a conventional EOS name (`<|endoftext|>` for the demo and GPT-NeoX,
`</s>`, `<eos>`, `<|end_of_text|>`). A checkpoint with none of these loads with `eos_id = None`
and a warning: generation then stops only at its token budget.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Sequence

from huggingface_hub import constants
from tokenizers import Tokenizer as _HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

EOS_TOKEN = "<|endoftext|>"  # the demo's (and GPT-NeoX's) end-of-text token
# Special tokens that mean "end of text" by convention, tried when no file of the checkpoint names
# one: GPT-2 / GPT-NeoX / the demo, T5 / Llama-2 / OPT, Gemma, Llama-3.
CONVENTIONAL_EOS = ("<|endoftext|>", "</s>", "<eos>", "<|end_of_text|>")
HUB_TIMEOUT_S = 10.0  # a hub download that cannot connect gives up after this long


class Tokenizer:
    """Thin wrapper over `tokenizers.Tokenizer`: text <-> token ids, plus the EOS id.

    eos_token: the end-of-text token, which must be in the vocabulary; None: the tokenizer has no
    EOS (`eos_id` is None; generation stops only at its token budget). `eos_source` says where the
    choice came from (shown in repr).
    """

    def __init__(self, hf: _HFTokenizer, eos_token: str | None = EOS_TOKEN, source: str = "",
                 eos_source: str = "given") -> None:
        eos = None if eos_token is None else hf.token_to_id(eos_token)
        if eos_token is not None and eos is None:
            raise ValueError(f"tokenizer {source or ''} has no {eos_token!r} token to use as EOS; "
                             "name the checkpoint's end-of-text token (config.json eos_token_id) or pass eos_token=None")
        self._tok = hf
        self.eos_id: int | None = eos
        self.eos_token = eos_token
        self.eos_source = eos_source if eos_token is not None else "none found"
        self.source = source

    # ---- loading ------------------------------------------------------------------------------
    @classmethod
    def from_file(cls, path: str | os.PathLike, eos_folders: list[Path] | None = None) -> "Tokenizer":
        """Load a `tokenizer.json` file; its EOS as `find_eos` names it from the files in
        `eos_folders` (default: the file's own folder)."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no tokenizer file at {path}; build the demo one with scripts/build_demo_data.py")
        hf = _HFTokenizer.from_file(str(path))
        token, where = find_eos(hf, eos_folders or [path.parent])
        if token is None:
            warnings.warn(f"{path}: the checkpoint names no end-of-text token (no eos_token_id in config.json, no "
                          f"eos_token in tokenizer_config.json / special_tokens_map.json, none of {list(CONVENTIONAL_EOS)} "
                          "in tokenizer.json); generation stops only at max_new_tokens. Add \"eos_token_id\" to "
                          "config.json to name one.", stacklevel=2)
        return cls(hf, token, source=str(path), eos_source=where)

    @classmethod
    def from_pretrained_dir(cls, folder: str | os.PathLike, config_folder: str | os.PathLike | None = None) -> "Tokenizer":
        """Load `<folder>/tokenizer.json` (a checkpoint folder, or assets/ for the demo), with the
        EOS token the checkpoint names (`find_eos`; config.json is read from `config_folder`,
        default `folder`)."""
        path = Path(folder) / "tokenizer.json"
        if not path.is_file():
            raise FileNotFoundError(
                f"{folder} has no tokenizer.json; copy the checkpoint's tokenizer.json there "
                f"(state-spaces models use EleutherAI/gpt-neox-20b's)"
            )
        return cls.from_file(path, eos_folders=[Path(folder)] + ([Path(config_folder)] if config_folder else []))

    @classmethod
    def from_hub(cls, repo_id: str, revision: str | None = None, config_folder: str | os.PathLike | None = None) -> "Tokenizer":
        """Download `tokenizer.json` from a hub repo (cached), e.g. "EleutherAI/gpt-neox-20b".
        `config_folder`: the model's own folder, whose files name the EOS first (`find_eos`).

        Uses the local cache first, so it works offline once downloaded; with no cache and no
        network it fails within HUB_TIMEOUT_S with a message naming the offline alternative.
        """
        from huggingface_hub import hf_hub_download  # hub only: huggingface_hub's HTTP stack loads on first download

        fix = (
            f"download {repo_id}'s tokenizer.json on a connected machine and load it with "
            f"Tokenizer.from_pretrained_dir(folder), or use the bundled demo model's tokenizer"
        )
        def load(path: str) -> "Tokenizer":
            return cls.from_file(path, eos_folders=([Path(config_folder)] if config_folder else []) + [Path(path).parent])

        try:  # cache hit: no network at all
            path = hf_hub_download(repo_id, "tokenizer.json", revision=revision, local_files_only=True)
        except Exception:
            path = None
        if path is not None:
            return load(path)
        if hub_offline():
            raise RuntimeError(f"tokenizer for {repo_id!r} is not cached and the hub is offline (HF_HUB_OFFLINE); {fix}")
        try:
            check_hub_reachable(repo_id, "model")  # hf_hub_download itself retries for ~25 s
            path = hf_hub_download(repo_id, "tokenizer.json", revision=revision, etag_timeout=HUB_TIMEOUT_S)
        except Exception as e:  # connection, DNS, 404, gated repo: all mean "not available here"
            raise RuntimeError(f"could not download tokenizer.json from {repo_id!r} ({type(e).__name__}: {e}); {fix}") from e
        return load(path)

    # ---- use ----------------------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        """Number of token ids the tokenizer can produce (special tokens included)."""
        return self._tok.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`, with no special tokens added."""
        return self._tok.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [e.ids for e in self._tok.encode_batch(list(texts), add_special_tokens=False)]

    def decode(self, ids: Sequence[int]) -> str:
        """Text of `ids`; special tokens are kept, so decode(encode(x)) == x for byte-level BPE."""
        return self._tok.decode(list(ids), skip_special_tokens=False)

    @property
    def special_ids(self) -> frozenset[int]:
        """Ids of the special tokens (EOS, padding, ...): markers for the model, never text for a user."""
        ids = {i for i, t in self._tok.get_added_tokens_decoder().items() if t.special}
        return frozenset(ids | ({self.eos_id} if self.eos_id is not None else set()))

    def display_text(self, ids: Sequence[int]) -> str:
        """What a user is shown of generated ids: cut at the first EOS (generation ends there), then
        decoded with the special tokens left out."""
        ids = list(ids)
        if self.eos_id is not None and self.eos_id in ids:
            ids = ids[: ids.index(self.eos_id)]
        return self._tok.decode(ids, skip_special_tokens=True)

    def token_strings(self, ids: Sequence[int]) -> list[str]:
        """Each id's text on its own (for display); multi-byte characters may split across ids."""
        return [self._tok.decode([i], skip_special_tokens=False) for i in ids]

    def __repr__(self) -> str:
        return (f"Tokenizer(vocab_size={self.vocab_size}, eos={self.eos_token!r} (id {self.eos_id}, "
                f"from {self.eos_source}), source={self.source!r})")


def find_eos(hf: _HFTokenizer, folders: list[Path]) -> tuple[str | None, str]:
    """The end-of-text token a checkpoint names, and where it was found.

    Looked up in this order, in each folder: config.json then generation_config.json
    (`eos_token_id`: an id, or a list whose first id is taken), tokenizer_config.json then
    special_tokens_map.json (`eos_token`: a string or {"content": ...}); then the first of
    CONVENTIONAL_EOS that tokenizer.json holds as a special token. Returns (None, "none found")
    when there is none. A named token missing from the vocabulary is an error that names the file.
    """
    for folder in folders:
        for name in ("config.json", "generation_config.json"):
            d = _read_json(folder / name)
            eos_id = d.get("eos_token_id")
            if isinstance(eos_id, list):
                eos_id = eos_id[0] if eos_id else None
            if eos_id is None:
                continue
            token = hf.id_to_token(int(eos_id))
            if token is None:
                raise ValueError(f"{folder / name}: eos_token_id {eos_id} is not in the tokenizer's "
                                 f"{hf.get_vocab_size(with_added_tokens=True)} tokens; fix eos_token_id")
            return token, f"{name} eos_token_id"
        for name in ("tokenizer_config.json", "special_tokens_map.json"):
            token = _read_json(folder / name).get("eos_token")
            if isinstance(token, dict):
                token = token.get("content")
            if not token:
                continue
            if hf.token_to_id(token) is None:
                raise ValueError(f"{folder / name}: eos_token {token!r} is not in tokenizer.json; fix eos_token")
            return token, f"{name} eos_token"
    special = {t.content for t in hf.get_added_tokens_decoder().values() if t.special}
    for token in CONVENTIONAL_EOS:
        if token in special:
            return token, "tokenizer.json special token"
    return None, "none found"


def _read_json(path: Path) -> dict:
    """A checkpoint's JSON file as a dict; {} when absent."""
    if not path.is_file():
        return {}
    d = json.loads(path.read_text(encoding="utf-8"))
    return d if isinstance(d, dict) else {}


_HUB_DOWN: list[str] = []  # the first failed connection of this process: later checks fail at once


def check_hub_reachable(repo_id: str, repo_type: str) -> None:
    """One metadata request with a short timeout and no retries; raises if the repo cannot be
    reached (no network, unknown repo). Download helpers retry with backoff for tens of seconds,
    so callers ask this first to fail fast. Once a request failed to connect, every later check in
    the process fails at once (an offline run tries the hub once, not once per model)."""
    from huggingface_hub import HfApi  # hub only: huggingface_hub's HTTP stack loads on first request

    if _HUB_DOWN:
        raise ConnectionError(f"the Hugging Face Hub could not be reached earlier in this run ({_HUB_DOWN[0]})")
    api = HfApi()
    info = api.dataset_info if repo_type == "dataset" else api.model_info
    try:
        info(repo_id, timeout=HUB_TIMEOUT_S)
    except Exception as e:
        # requests' ConnectionError / Timeout, httpx's TransportError (ConnectError, ConnectTimeout...):
        # no network; an HTTP error (404, gated repo) is about this repo only and is not remembered
        if any(c.__name__ in ("ConnectionError", "TransportError", "Timeout", "TimeoutError", "TimeoutException")
               for c in type(e).__mro__):
            _HUB_DOWN.append(f"{type(e).__name__}: {e}")
        raise


def hub_offline() -> bool:
    """Whether the user asked for offline mode (read at call time, unlike library constants)."""
    truthy = {"1", "true", "yes", "on"}
    if any(os.environ.get(k, "").strip().lower() in truthy for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")):
        return True
    return bool(constants.HF_HUB_OFFLINE)


def train_bpe(texts: Sequence[str], vocab_size: int = 4096) -> Tokenizer:
    """Train a byte-level BPE tokenizer with EOS_TOKEN as its only special token (id 0).

    Digits are split one per token (as in many LM tokenizers) so that numbers, which the demo
    world is full of, are copied digit by digit instead of spending merges on digit n-grams.
    Byte-level pieces cover every byte, so any text round-trips (decode(encode(x)) == x).
    """
    hf = _HFTokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    hf.train_from_iterator(texts, trainer=trainer)
    return Tokenizer(hf, source="trained")


def save(tokenizer: Tokenizer, path: str | os.PathLike) -> None:
    """Write `tokenizer.json` (compact: one line; stable for identical tokenizers)."""
    tokenizer._tok.save(str(path), pretty=False)
