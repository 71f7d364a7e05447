"""One tokenizer wrapper for every model: the bundled demo tokenizer and real checkpoints' ones.

Both are a Hugging Face `tokenizer.json` (the demo: byte-level BPE, 4096 pieces, trained by
scripts/build_demo_data.py; state-spaces Mamba checkpoints: GPT-NeoX-20B's). Both use
"<|endoftext|>" as end-of-text / document separator. `encode` never adds special tokens: the
engine decides where EOS goes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from tokenizers import Tokenizer as _HFTokenizer

EOS_TOKEN = "<|endoftext|>"
HUB_TIMEOUT_S = 10.0  # a hub download that cannot connect gives up after this long


class Tokenizer:
    """Thin wrapper over `tokenizers.Tokenizer`: text <-> token ids, plus the EOS id."""

    def __init__(self, hf: _HFTokenizer, eos_token: str = EOS_TOKEN, source: str = "") -> None:
        eos = hf.token_to_id(eos_token)
        if eos is None:
            raise ValueError(f"tokenizer {source or ''} has no {eos_token!r} token to use as EOS")
        self._tok = hf
        self.eos_id: int = eos
        self.eos_token = eos_token
        self.source = source

    # ---- loading ------------------------------------------------------------------------------
    @classmethod
    def from_file(cls, path: str | os.PathLike) -> "Tokenizer":
        """Load a `tokenizer.json` file."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no tokenizer file at {path}; build the demo one with scripts/build_demo_data.py")
        return cls(_HFTokenizer.from_file(str(path)), source=str(path))

    @classmethod
    def from_pretrained_dir(cls, folder: str | os.PathLike) -> "Tokenizer":
        """Load `<folder>/tokenizer.json` (a checkpoint folder, or assets/ for the demo)."""
        path = Path(folder) / "tokenizer.json"
        if not path.is_file():
            raise FileNotFoundError(
                f"{folder} has no tokenizer.json; copy the checkpoint's tokenizer.json there "
                f"(state-spaces models use EleutherAI/gpt-neox-20b's)"
            )
        return cls.from_file(path)

    @classmethod
    def from_hub(cls, repo_id: str, revision: str | None = None) -> "Tokenizer":
        """Download `tokenizer.json` from a hub repo (cached), e.g. "EleutherAI/gpt-neox-20b".

        Uses the local cache first, so it works offline once downloaded; with no cache and no
        network it fails within HUB_TIMEOUT_S with a message naming the offline alternative.
        """
        from huggingface_hub import hf_hub_download

        fix = (
            f"download {repo_id}'s tokenizer.json on a connected machine and load it with "
            f"Tokenizer.from_pretrained_dir(folder), or use the bundled demo model's tokenizer"
        )
        try:  # cache hit: no network at all
            return cls.from_file(hf_hub_download(repo_id, "tokenizer.json", revision=revision, local_files_only=True))
        except Exception:
            pass
        if hub_offline():
            raise RuntimeError(f"tokenizer for {repo_id!r} is not cached and the hub is offline (HF_HUB_OFFLINE); {fix}")
        try:
            check_hub_reachable(repo_id, "model")  # hf_hub_download itself retries for ~25 s
            path = hf_hub_download(repo_id, "tokenizer.json", revision=revision, etag_timeout=HUB_TIMEOUT_S)
        except Exception as e:  # connection, DNS, 404, gated repo: all mean "not available here"
            raise RuntimeError(f"could not download tokenizer.json from {repo_id!r} ({type(e).__name__}: {e}); {fix}") from e
        return cls.from_file(path)

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

    def token_strings(self, ids: Sequence[int]) -> list[str]:
        """Each id's text on its own (for display); multi-byte characters may split across ids."""
        return [self._tok.decode([i], skip_special_tokens=False) for i in ids]

    def __repr__(self) -> str:
        return f"Tokenizer(vocab_size={self.vocab_size}, eos_id={self.eos_id}, source={self.source!r})"


def check_hub_reachable(repo_id: str, repo_type: str) -> None:
    """One metadata request with a short timeout and no retries; raises if the repo cannot be
    reached (no network, unknown repo). Download helpers retry with backoff for tens of seconds,
    so callers ask this first to fail fast."""
    from huggingface_hub import HfApi

    api = HfApi()
    info = api.dataset_info if repo_type == "dataset" else api.model_info
    info(repo_id, timeout=HUB_TIMEOUT_S)


def hub_offline() -> bool:
    """Whether the user asked for offline mode (read at call time, unlike library constants)."""
    truthy = {"1", "true", "yes", "on"}
    if any(os.environ.get(k, "").strip().lower() in truthy for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")):
        return True
    try:
        from huggingface_hub import constants

        return bool(constants.HF_HUB_OFFLINE)
    except Exception:
        return False


def train_bpe(texts: Sequence[str], vocab_size: int = 4096) -> Tokenizer:
    """Train a byte-level BPE tokenizer with EOS_TOKEN as its only special token (id 0).

    Digits are split one per token (as in many LM tokenizers) so that numbers, which the demo
    world is full of, are copied digit by digit instead of spending merges on digit n-grams.
    Byte-level pieces cover every byte, so any text round-trips (decode(encode(x)) == x).
    """
    from tokenizers import decoders, models, pre_tokenizers, trainers

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
