"""load_model: "demo" | a local folder | a hub id -> SSMLanguageModel with a tokenizer.

Folder layouts read:
  mamba_ssm     config.json {d_model, n_layer, ssm_cfg, ...} + pytorch_model.bin | model.safetensors
                (state-spaces/mamba2-130m ... mamba2-2.7b, state-spaces/mamba-130m ... mamba-2.8b)
  transformers  config.json {"model_type": "mamba" | "mamba2" | "falcon_mamba", ...} + model.safetensors
                (possibly sharded with model.safetensors.index.json) | pytorch_model.bin
  hybrids       the same files of a nemotron_h, granitemoehybrid or bamba checkpoint (engine/hybrid.py),
                Nemotron-H's original names (backbone.*, one tensor per expert) and Granite's older
                MoE names included; falcon_h1 is refused in one line saying why
Tokenizer: the folder's tokenizer.json, else EleutherAI/gpt-neox-20b (what state-spaces models use);
its end-of-text token is the one the checkpoint names (config.json eos_token_id, tokenizer_config.json /
special_tokens_map.json eos_token; see picaso_core.engine.tokenizer.find_eos), None where it names none.

pytorch_model.bin is read with torch.load(weights_only=True): never plain unpickling.
Every weight key and shape is checked; a mismatch names the key.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from picaso_core.light.assets import ASSETS  # the checkout's assets/ or the installed package's copy
from picaso_core.engine.config import ModelConfig
from picaso_core.engine.hybrid import HybridLanguageModel
from picaso_core.engine.hybrid_config import HYBRID_FAMILIES, UNSUPPORTED, HybridConfig
from picaso_core.engine.model import SSMLanguageModel
from picaso_core.engine.rng import seeded
from picaso_core.engine.tokenizer import Tokenizer, check_hub_reachable, hub_offline
from picaso_core.engine.tokenizer import save as save_tokenizer

DEMO_MODEL_DIR = ASSETS / "demo_model"
# bundled models by name: the base demo model and its BPTC fine-tune (scripts/finetune_demo.py, PICASO sec. 5)
BUNDLED = {"demo": (DEMO_MODEL_DIR, "scripts/train_demo.py"),
           "demo-bptc": (ASSETS / "demo_model_bptc", "scripts/finetune_demo.py"),
           "demo-hybrid": (ASSETS / "demo_hybrid_model", "scripts/train_demo.py --arch hybrid --save-dtype bfloat16 "
                           "--out assets/demo_hybrid_model")}
DEFAULT_TOKENIZER = "EleutherAI/gpt-neox-20b"
_HUB_FILES = ["config.json", "*.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "tokenizer.json"]
READS = ("mamba", "mamba2", "falcon_mamba", *HYBRID_FAMILIES)  # the transformers model_types load_model reads


def load_model(name_or_path: str = "demo", device=None, dtype: torch.dtype | None = None) -> SSMLanguageModel:
    """Load a model in eval mode: "demo", "demo-bptc" (its BPTC fine-tune), a folder or a hub id. `dtype` (e.g. torch.bfloat16) casts the weights; states stay float32."""
    check_device(device)
    folder = resolve_model_folder(name_or_path)
    config = read_config(folder)
    with seeded(0):  # the initial weights, overwritten below, drawn aside from torch's generator (engine/rng.py)
        model = HybridLanguageModel(config) if isinstance(config, HybridConfig) else SSMLanguageModel(config)
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
def read_config(folder: Path) -> ModelConfig | HybridConfig:
    path = Path(folder) / "config.json"
    if not path.exists():
        raise FileNotFoundError(f"{folder} has no config.json")
    d = json.loads(path.read_text())
    if "model_type" not in d:
        return ModelConfig.from_dict(d)
    mt = d["model_type"]
    reads = f"this app reads {', '.join(READS)} (and mamba_ssm's config.json without a model_type)"
    if mt in UNSUPPORTED:
        raise ValueError(f"{path}: model_type {mt!r} is not supported: {UNSUPPORTED[mt]}; {reads}")
    if mt not in READS:
        raise ValueError(f"{path}: model_type {mt!r} is not a model this app reads; {reads}: "
                         "point --model at a checkpoint of one of those")
    if mt not in HYBRID_FAMILIES:
        return ModelConfig.from_transformers(d)
    try:
        return HybridConfig.from_transformers(d)
    except KeyError as e:
        raise ValueError(f"{path} lacks {e.args[0]!r}, which a {mt} config needs: use the config.json that came "
                         "with the checkpoint") from None
    except ValueError as e:
        raise ValueError(f"{path}: {e}: fix it, or use the config.json that came with the checkpoint") from None


# ---- weights ----------------------------------------------------------------------------------
def _weights_file(folder: Path) -> str:
    """The file a folder's weights are read from (for messages)."""
    for name in ("model.safetensors.index.json", "model.safetensors", "pytorch_model.bin"):
        if (Path(folder) / name).exists():
            return name
    return "model.safetensors"


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


def _to_hybrid_names(sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """transformers' names for a hybrid's weights: Nemotron-H's original `backbone.` and one tensor per
    expert (stacked here, as transformers' conversion does), Granite's older MoE names."""
    out, experts = {}, {}
    old = {"block_sparse_moe.input_linear.weight": "block_sparse_moe.experts.gate_up_proj",
           "block_sparse_moe.output_linear.weight": "block_sparse_moe.experts.down_proj",
           "block_sparse_moe.router.layer.weight": "block_sparse_moe.router.weight"}
    for k, v in sd.items():
        k = "model." + k[len("backbone."):] if k.startswith("backbone.") else k
        k = next((k.replace(a, b) for a, b in old.items() if k.endswith(a)), k)
        m = re.fullmatch(r"(.*\.mixer\.experts)\.(\d+)\.(up|down)_proj\.weight", k)
        if m:
            experts.setdefault(f"{m[1]}.{m[3]}_proj", {})[int(m[2])] = v
        else:
            out[k] = v
    out.update({k: torch.stack([parts[i] for i in sorted(parts)]) for k, parts in experts.items()})
    return out


def _layer_kinds(keys) -> dict[int, str]:
    """Each layer's kind as its weight names show it (a Mamba mixer's A_log, attention's q_proj, ...)."""
    found: dict[int, set] = {}
    for k in keys:
        m = re.match(r"model\.layers\.(\d+)\.(.*)", k)
        if m:
            rest = m[2]
            kind = ("mamba" if re.search(r"A_log|in_proj|conv1d", rest) else
                    "attention" if re.search(r"[qkvo]_proj", rest) and "experts" not in rest else
                    "moe" if "mixer.experts" in rest or "mixer.gate." in rest else
                    "mlp" if "mixer.up_proj" in rest or "mixer.down_proj" in rest else None)
            found.setdefault(int(m[1]), set()).add(kind)
    order = ("mamba", "attention", "moe", "mlp")
    return {i: next((k for k in order if k in s), "no") for i, s in found.items()}


def _check_layer_kinds(model: HybridLanguageModel, sd: dict, folder: Path) -> None:
    """A config whose pattern and weights disagree, named in one line (before the key-by-key check)."""
    want, have = _layer_kinds(model.state_dict()), _layer_kinds(sd)
    bad = next((i for i in sorted(want) if have.get(i, "no") != want[i]), None)
    if bad is not None:
        hf = model.config.hf
        key = {"nemotron_h": "hybrid_override_pattern" if "hybrid_override_pattern" in hf else "layers_block_type",
               "granitemoehybrid": "layer_types", "bamba": "attn_layer_indices"}[model.config.model_type]
        raise ValueError(f"{Path(folder) / 'config.json'} ({key}) makes layer {bad} {want[bad]} but "
                         f"{Path(folder) / _weights_file(folder)} holds {have.get(bad, 'no')} weights there: use the "
                         f"config.json that came with these weights, or correct its {key}")


def load_weights(model: SSMLanguageModel, folder: Path) -> None:
    """Copy a checkpoint into `model`, checking every key and shape."""
    raw = _read_state_dict(folder)
    hybrid = isinstance(model, HybridLanguageModel)
    sd = _to_hybrid_names(raw) if hybrid else _to_mamba_ssm_names(raw)
    if hybrid:
        _check_layer_kinds(model, sd, folder)
    expected = model.state_dict()
    tied = model.config.tie_embeddings
    if tied:
        expected.pop("lm_head.weight")
        sd.pop("lm_head.weight", None)  # a tied copy, when the checkpoint saved one
    missing = sorted(set(expected) - set(sd))
    unexpected = sorted(set(sd) - set(expected))
    where = Path(folder) / _weights_file(folder)
    if missing or unexpected:
        raise ValueError(f"{where} does not match {Path(folder) / 'config.json'}: "
                         f"missing keys {missing[:5]}{'...' if len(missing) > 5 else ''}, "
                         f"unexpected keys {unexpected[:5]}{'...' if len(unexpected) > 5 else ''}; "
                         "re-download the weights, or use the config.json that came with them")
    for k, v in expected.items():
        if tuple(sd[k].shape) != tuple(v.shape):
            raise ValueError(f"{where}: weight {k} has shape {list(sd[k].shape)}, "
                             f"the config needs {list(v.shape)}; use the config.json that came with these weights")
    model.load_state_dict(sd, strict=not tied)


def save_model(model: SSMLanguageModel, folder: str | Path) -> None:
    """Write `model` in the mamba_ssm layout (a hybrid: its family's transformers layout, which
    transformers' own class loads): config.json + model.safetensors (+ tokenizer.json)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    cfg = model.config.hf if isinstance(model.config, HybridConfig) else model.config.to_dict()
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
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
