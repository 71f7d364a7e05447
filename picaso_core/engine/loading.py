"""load_model: "demo" | a local folder | a hub id -> SSMLanguageModel with a tokenizer.

Folder layouts read:
  mamba_ssm     config.json {d_model, n_layer, ssm_cfg, ...} + pytorch_model.bin | model.safetensors
                (state-spaces/mamba2-130m ... mamba2-2.7b, state-spaces/mamba-130m ... mamba-2.8b)
  transformers  config.json {"model_type": "mamba" | "mamba2", ...} + model.safetensors
                (possibly sharded with model.safetensors.index.json) | pytorch_model.bin
Tokenizer: the folder's tokenizer.json, else EleutherAI/gpt-neox-20b (what state-spaces models use);
its end-of-text token is the one the checkpoint names (config.json eos_token_id, tokenizer_config.json /
special_tokens_map.json eos_token; see picaso_core.engine.tokenizer.find_eos), None where it names none.

pytorch_model.bin is read with torch.load(weights_only=True): never plain unpickling.
Every weight key and shape is checked; a mismatch names the key.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from picaso_core.assets import ASSETS  # the checkout's assets/ or the installed package's copy
from picaso_core.engine.config import ModelConfig
from picaso_core.engine.model import SSMLanguageModel
from picaso_core.engine.rng import seeded
from picaso_core.engine.tokenizer import Tokenizer, check_hub_reachable, hub_offline
from picaso_core.engine.tokenizer import save as save_tokenizer

DEMO_MODEL_DIR = ASSETS / "demo_model"
# bundled models by name: the base demo model and its BPTC fine-tune (scripts/finetune_demo.py, PICASO sec. 5)
BUNDLED = {"demo": (DEMO_MODEL_DIR, "scripts/train_demo.py"),
           "demo-bptc": (ASSETS / "demo_model_bptc", "scripts/finetune_demo.py")}
DEFAULT_TOKENIZER = "EleutherAI/gpt-neox-20b"
_HUB_FILES = ["config.json", "*.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "tokenizer.json"]


def load_model(name_or_path: str = "demo", device=None, dtype: torch.dtype | None = None) -> SSMLanguageModel:
    """Load a model in eval mode: "demo", "demo-bptc" (its BPTC fine-tune), a folder or a hub id. `dtype` (e.g. torch.bfloat16) casts the weights; states stay float32."""
    check_device(device)
    folder = resolve_model_folder(name_or_path)
    config = read_config(folder)
    with seeded(0):  # the initial weights, overwritten below, drawn aside from torch's generator (engine/rng.py)
        model = SSMLanguageModel(config)
    load_weights(model, folder)
    model.tokenizer = _load_tokenizer(folder)
    if model.tokenizer.vocab_size > config.padded_vocab_size:
        raise ValueError(f"{folder}: tokenizer has {model.tokenizer.vocab_size} tokens but the model "
                         f"only {config.padded_vocab_size} embeddings")
    return model.to(device=device, dtype=dtype).eval()


def check_device(device) -> None:
    """A CUDA device asked of a torch that cannot give one fails here, naming the fix (torch itself
    raises a bare AssertionError: "Torch not compiled with CUDA enabled")."""
    if device is None or torch.device(device).type != "cuda" or torch.cuda.is_available():
        return
    if torch.version.cuda is None:
        raise RuntimeError(f"device {device!r}: this torch ({torch.__version__}) is the CPU build. Install a CUDA build "
                           "(README, 'Installing'; the Docker image: --build-arg TORCH_INDEX_URL=https://pypi.org/simple), "
                           "or run on the CPU (no --device / PICASO_DEVICE)")
    raise RuntimeError(f"device {device!r}: torch {torch.__version__} is built for CUDA {torch.version.cuda} but sees no "
                       "GPU (no GPU, a driver too old for that CUDA, or a container started without --gpus all)")


# ---- where the files are ----------------------------------------------------------------------
def resolve_model_folder(name_or_path: str) -> Path:
    if name_or_path in BUNDLED:
        folder, script = BUNDLED[name_or_path]
        if not (folder / "config.json").exists():
            raise FileNotFoundError(f"the bundled model {name_or_path!r} is missing from {folder}; "
                                    f"regenerate it with `python {script}`")
        return folder
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return path
    if path.exists() or name_or_path.count("/") != 1 or name_or_path.startswith((".", "/", "~")):
        raise FileNotFoundError(f"{name_or_path!r} is neither a model folder nor a hub id like "
                                "'state-spaces/mamba2-130m'; use 'demo' for the bundled model")
    return _download(name_or_path, _HUB_FILES)


def _download(repo_id: str, patterns: list[str]) -> Path:
    from huggingface_hub import snapshot_download  # hub only: huggingface_hub's HTTP stack loads on first download

    try:  # already in the local cache: no network needed
        return Path(snapshot_download(repo_id, allow_patterns=patterns, local_files_only=True))
    except Exception:
        pass
    fix = ("Use the bundled model (`demo`) or a local folder with config.json and weights "
           "(`--model /path/to/folder`).")
    if hub_offline():
        raise ConnectionError(f"cannot download {repo_id!r}: HF_HUB_OFFLINE is set. {fix}")
    try:  # one short metadata request: the download itself retries for tens of seconds
        check_hub_reachable(repo_id, "model")
    except Exception as e:
        raise ConnectionError(f"cannot download {repo_id!r} from the Hugging Face Hub "
                              f"({type(e).__name__}: {e}). {fix}") from e
    return Path(snapshot_download(repo_id, allow_patterns=patterns))


# ---- config -----------------------------------------------------------------------------------
def read_config(folder: Path) -> ModelConfig:
    path = Path(folder) / "config.json"
    if not path.exists():
        raise FileNotFoundError(f"{folder} has no config.json")
    d = json.loads(path.read_text())
    return ModelConfig.from_transformers(d) if "model_type" in d else ModelConfig.from_dict(d)


# ---- weights ----------------------------------------------------------------------------------
def _read_state_dict(folder: Path) -> dict[str, torch.Tensor]:
    folder = Path(folder)
    index = folder / "model.safetensors.index.json"
    if index.exists():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        sd: dict[str, torch.Tensor] = {}
        for shard in shards:
            sd.update(load_file(folder / shard))
        return sd
    if (folder / "model.safetensors").exists():
        return load_file(folder / "model.safetensors")
    if (folder / "pytorch_model.bin").exists():
        return torch.load(folder / "pytorch_model.bin", map_location="cpu", weights_only=True)
    raise FileNotFoundError(f"{folder} has no model.safetensors or pytorch_model.bin")


def _to_mamba_ssm_names(sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """transformers calls the embedding `backbone.embeddings`; every other name is mamba_ssm's."""
    return {k.replace("backbone.embeddings.", "backbone.embedding."): v for k, v in sd.items()}


def load_weights(model: SSMLanguageModel, folder: Path) -> None:
    """Copy a checkpoint into `model`, checking every key and shape."""
    sd = _to_mamba_ssm_names(_read_state_dict(folder))
    expected = model.state_dict()
    tied = model.config.tie_embeddings
    if tied:
        expected.pop("lm_head.weight")
        sd.pop("lm_head.weight", None)  # a tied copy, when the checkpoint saved one
    missing = sorted(set(expected) - set(sd))
    unexpected = sorted(set(sd) - set(expected))
    if missing or unexpected:
        raise ValueError(f"{folder}: checkpoint does not match the config: "
                         f"missing keys {missing[:5]}{'...' if len(missing) > 5 else ''}, "
                         f"unexpected keys {unexpected[:5]}{'...' if len(unexpected) > 5 else ''}")
    for k, v in expected.items():
        if tuple(sd[k].shape) != tuple(v.shape):
            raise ValueError(f"{folder}: weight {k} has shape {list(sd[k].shape)}, "
                             f"the config needs {list(v.shape)}")
    model.load_state_dict(sd, strict=not tied)


def save_model(model: SSMLanguageModel, folder: str | Path) -> None:
    """Write `model` in the mamba_ssm layout: config.json + model.safetensors (+ tokenizer.json)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(model.config.to_dict(), indent=2))
    sd = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    if model.config.tie_embeddings:
        sd.pop("lm_head.weight")
    save_file(sd, str(folder / "model.safetensors"), metadata={"format": "pt"})
    if model.tokenizer is not None:
        save_tokenizer(model.tokenizer, folder / "tokenizer.json")


# ---- tokenizer --------------------------------------------------------------------------------
def _load_tokenizer(folder: Path):
    if (Path(folder) / "tokenizer.json").exists():
        return Tokenizer.from_pretrained_dir(folder)
    return Tokenizer.from_hub(DEFAULT_TOKENIZER, config_folder=folder)  # the EOS: the model's files first
