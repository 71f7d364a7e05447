"""Train the bundled demo model: a small Mamba-2 on the generated demo world, with this engine.

    python scripts/train_demo.py                      # the committed model (seeded), 58 min on 2 cores
    python scripts/train_demo.py --minutes 2 --out /tmp/demo_try   # a quick smoke run
    python scripts/train_demo.py --arch hybrid --save-dtype bfloat16 --out assets/demo_hybrid_model   # demo-hybrid

The data is an endless stream of freshly generated examples (picaso_core.data.demo_world): every
retrieval / QA example invents new entities, so facts cannot be memorised and the only way to
lower the loss on a continuation is to copy from the contexts in front of it. The skill tasks'
pairs are the opposite: knowledge passages state every pair (train and test items) so that the
model memorises them, while `question → answer` demonstrations use train items only (mix "v4").
Examples are packed whole into fixed-length rows, each ending in <|endoftext|> (see packed_batches).

Writes <out>/config.json, model.safetensors, tokenizer.json (the mamba_ssm layout that
load_model reads) and <out>/train_log.json (losses, tokens, time). With --arch hybrid the model is a
Nemotron-H (hybrid_config) and the folder is in transformers' nemotron_h layout, which
transformers.NemotronHForCausalLM loads as well.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from picaso_core import ModelConfig  # noqa: E402
from picaso_core.light.assets import ASSETS  # noqa: E402
from picaso_core.data.demo_world import CONTEXT_SEP, MIXES, render_parts, training_examples  # noqa: E402
from picaso_core.light.defaults import count, number  # noqa: E402
from picaso_core.engine.tokenizer import Tokenizer  # noqa: E402


def demo_config(vocab_size: int) -> ModelConfig:
    """~2.8M parameters: small enough to train on 2 CPU cores. d_state 64 (Mamba-2's default is 128)
    gives recall room for ~300 tokens of contexts at no measurable training cost on CPU."""
    return ModelConfig(
        d_model=256, n_layer=4, vocab_size=vocab_size, pad_vocab_size_multiple=16,
        ssm_cfg=dict(layer="Mamba2", d_state=64, headdim=32, ngroups=1, chunk_size=64, expand=2),
    )


HYBRID_PATTERN = "M-M*-M-M-"  # Nemotron-H's blocks: M Mamba-2, * attention, - MLP


def hybrid_config(vocab_size: int, eos_id: int) -> dict:
    """demo-hybrid: the demo model's 4 Mamba-2 layers (same d_model, d_state, heads, chunk) with one
    position-free attention layer among them (1 mixing layer in 5; Nemotron-H-8B has 4 in 52) and a
    relu² MLP after each mixing layer but one, as Nemotron-H's "M-M*-M-" patterns place them: ~5M
    parameters. A transformers NemotronHConfig's config.json: the engine reads it, save_model writes it
    back and NemotronHForCausalLM loads the folder. Untied head: transformers' Nemotron-H never ties it."""
    return {
        "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "vocab_size": vocab_size,
        "hidden_size": 256, "hybrid_override_pattern": HYBRID_PATTERN, "num_hidden_layers": len(HYBRID_PATTERN),
        "tie_word_embeddings": False, "layer_norm_epsilon": 1e-5, "initializer_range": 0.02,
        "bos_token_id": eos_id, "eos_token_id": eos_id, "pad_token_id": eos_id,
        # attention: grouped-query (8 query, 2 key-value heads), no position encoding
        "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 32, "attention_bias": False,
        "max_position_embeddings": 4096,
        "intermediate_size": 512, "mlp_hidden_act": "relu2", "mlp_bias": False,
        # Mamba-2: as the demo model's (d_inner 512 = 16 heads x 32, d_state 64, one group, chunk 64)
        "mamba_num_heads": 16, "mamba_head_dim": 32, "ssm_state_size": 64, "n_groups": 1, "conv_kernel": 4,
        "expand": 2, "chunk_size": 64, "use_conv_bias": True, "use_bias": False, "mamba_proj_bias": False,
        "mamba_hidden_act": "silu", "time_step_min": 0.001, "time_step_max": 0.1, "time_step_floor": 1e-4,
        "time_step_limit": [0.001, float("inf")],  # the engine's clamp, stated: transformers' default is (0, inf)
        "residual_in_fp32": False, "rescale_prenorm_residual": True, "use_cache": True,
    }


def build_hybrid(hf: dict, init_scheme: str, key_len: int):
    """A HybridLanguageModel from a nemotron_h config dict: residual-branch outputs (Mamba-2 out_proj,
    attention o_proj, MLP down_proj) scaled by 1/sqrt(layers) as mamba_ssm's and Nemotron-H's inits do;
    mimetic init on the Mamba-2 layers (engine/init.py reads `backbone.layers[i].mixer`: handed a view of
    them), attention and MLPs at their default init."""
    from types import SimpleNamespace  # the hybrid path only

    import torch

    from picaso_core.engine.hybrid import HybridLanguageModel
    from picaso_core.engine.hybrid_config import HybridConfig
    from picaso_core.engine.init import mimetic_init_
    from picaso_core.engine.model import Mamba2Mixer

    model = HybridLanguageModel(HybridConfig.from_transformers(hf))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("out_proj.weight", "o_proj.weight", "down_proj.weight")):
                p /= math.sqrt(len(model.model.layers))
    if init_scheme == "mimetic":
        mambas = [layer for layer in model.model.layers if isinstance(getattr(layer, "mixer", None), Mamba2Mixer)]
        mimetic_init_(SimpleNamespace(config=model.config, backbone=SimpleNamespace(layers=mambas)), key_len=key_len)
    return model


def copy_drill(example: dict, rng: random.Random) -> str | None:
    """Contexts, then one of them again verbatim: every repeated token rewards copying from context,
    the in-context mechanism (induction) that the retrieval continuations need but rarely reward."""
    ctx = example["contexts"]
    if not ctx:
        return None
    shown = rng.sample(ctx, min(len(ctx), rng.randint(1, 3)))
    return CONTEXT_SEP.join(shown) + CONTEXT_SEP + rng.choice(shown)


POOL = 16  # documents the packer chooses from when filling a row


def packed_batches(tok: Tokenizer, seed: int, batch: int, seq_len: int, copy_drills: float = 0.0,
                   mix: dict[str, float] | None = None):
    """Yield (inputs, targets), LongTensors [batch, seq_len], of WHOLE documents packed into rows:
    ctx1\\n\\nctx2...\\n\\nquery cont<eos>, or with probability `copy_drills` a copy drill made from the
    example's contexts instead.

    A document never straddles two rows (plain packing would cut most retrieval examples, which are
    ~350 tokens, and teach continuations without their contexts); the end of a row is padded with
    <eos> and its targets are -100 (no loss); rows are filled first-fit from a pool of POOL
    documents, so little is padding. Documents longer than a row are skipped.
    Contexts appear in a random order (the generator shuffles them), which is what Concat sees."""
    import torch  # here and in main, not at the top: --help and a bad value answer at once (issue 48)

    stream = training_examples(seed, mix=mix)
    rng = random.Random(seed)
    pool: list[list[int]] = []  # documents waiting for a row, oldest first

    def refill() -> None:
        while len(pool) < POOL:
            ex = next(stream)
            drill = copy_drill(ex, rng) if rng.random() < copy_drills else None
            doc = tok.encode(drill if drill is not None else "".join(render_parts(ex))) + [tok.eos_id]
            if len(doc) <= seq_len + 1:
                pool.append(doc)

    while True:
        inputs = torch.full((batch, seq_len), tok.eos_id, dtype=torch.long)
        targets = torch.full((batch, seq_len), -100, dtype=torch.long)
        for r in range(batch):
            row: list[int] = []
            while True:  # first fit, oldest first: every document gets placed, the gaps stay small
                refill()
                fit = next((i for i, d in enumerate(pool) if len(row) + len(d) <= seq_len + 1), None)
                if fit is None:
                    break
                row += pool.pop(fit)
            inputs[r, : len(row) - 1] = torch.tensor(row[:-1])
            targets[r, : len(row) - 1] = torch.tensor(row[1:])
        yield inputs, targets


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ASSETS / "demo_model"))
    ap.add_argument("--init", default=None, help="start from this model folder instead of random weights "
                    "(a second training phase)")
    ap.add_argument("--minutes", type=number(above=0), default=58.0,
                    help="wall-clock training budget (compilation included)")
    ap.add_argument("--batch", type=count(1), default=16)
    ap.add_argument("--seq-len", type=count(1), default=512)
    ap.add_argument("--lr", type=number(above=0), default=3e-3)
    ap.add_argument("--warmup", type=count(1), default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--key-len", type=count(1), default=1, help="mimetic init: tokens per induction key")
    ap.add_argument("--init-scheme", choices=("mimetic", "default"), default="mimetic",
                    help="mimetic (picaso_core/engine/init.py: layers start as previous-token-key linear attention, "
                    "so copying from context is learnt in minutes) or mamba_ssm's default; ignored with --init")
    ap.add_argument("--mix", choices=sorted(MIXES), default="v4", help="document shares of the stream "
                    "(demo_world.MIXES): v4 trained the bundled model; v1 the first one (weak skills); v2 and v3 "
                    "earlier attempts")
    ap.add_argument("--copy-drills", type=number(0, 1), default=0.15, help="share of documents that are copy drills")
    ap.add_argument("--threads", type=count(0), default=0, help="torch threads (0: all cores)")
    ap.add_argument("--log-every", type=count(1), default=25)
    ap.add_argument("--save-every", type=count(1), default=250)
    ap.add_argument("--keep-checkpoints", action="store_true", help="also keep every saved step under <out>/checkpoints/")
    ap.add_argument("--arch", choices=("mamba2", "hybrid"), default="mamba2", help="mamba2: the bundled `demo` "
                    "(demo_config); hybrid: `demo-hybrid`, a Nemotron-H of Mamba-2, attention and MLP blocks (hybrid_config)")
    ap.add_argument("--save-dtype", choices=("float32", "bfloat16"), default="float32",
                    help="dtype of the saved weights (training is float32 either way; bfloat16 halves the folder)")
    ap.add_argument("--max-steps", type=count(0), default=0, help="stop after this many steps (0: the time budget only)")
    ap.add_argument("--no-compile", action="store_true", help="eager mode (torch.compile fuses the "
                    "scan's elementwise ops: ~1.5x faster on CPU after a ~1 min compile)")
    args = ap.parse_args(argv)
    import torch

    from picaso_core import SSMLanguageModel, load_model
    from picaso_core.engine.init import mimetic_init_
    from picaso_core.engine.loading import save_model

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    tok = Tokenizer.from_file(ASSETS / "tokenizer.json")
    if args.init:
        model = load_model(args.init)
        if model.tokenizer.vocab_size != tok.vocab_size:
            raise ValueError(f"{args.init} was trained with another tokenizer than {ASSETS / 'tokenizer.json'}")
    elif args.arch == "hybrid":
        model = build_hybrid(hybrid_config(tok.vocab_size, tok.eos_id), args.init_scheme, args.key_len)
    else:
        model = SSMLanguageModel(demo_config(tok.vocab_size))
        if args.init_scheme == "mimetic":
            mimetic_init_(model, key_len=args.key_len)
    model.tokenizer = tok
    n_params = sum(p.numel() for p in model.parameters())
    print(f"params {n_params / 1e6:.2f}M  config {json.dumps(model.config.to_dict())}", flush=True)

    # no weight decay on norms, biases, A_log, D, dt_bias (as mamba_ssm's recipes)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    def lm_loss(inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits, _ = model(inputs)
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)

    def save(m, folder) -> None:
        if args.save_dtype == "float32":
            save_model(m, folder)
            return
        half = copy.deepcopy(m).to(torch.bfloat16)  # a copy: training goes on in float32
        half.tokenizer = m.tokenizer
        save_model(half, folder)

    step_loss = lm_loss if args.no_compile else torch.compile(lm_loss, dynamic=False)
    budget = args.minutes * 60
    batches = packed_batches(tok, args.seed, args.batch, args.seq_len, args.copy_drills, MIXES[args.mix])
    log, t0, step, tokens = [], time.time(), 0, 0
    model.train()
    while True:
        elapsed = time.time() - t0
        if elapsed >= budget or step == args.max_steps > 0:
            break
        # warmup, then cosine decay to 10% over the wall-clock budget
        frac = elapsed / budget
        lr = args.lr * min(1.0, (step + 1) / args.warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr
        loss = step_loss(*next(batches))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        tokens += args.batch * args.seq_len  # row positions, padding included
        if step % args.log_every == 0 or step == 1:
            el = time.time() - t0
            log.append({"step": step, "loss": round(loss.item(), 4), "lr": lr, "tokens": tokens, "seconds": round(el, 1)})
            print(f"step {step:5d}  loss {loss.item():.4f}  lr {lr:.2e}  tok/s {tokens / el:,.0f}  "
                  f"{el / 60:.1f} min", flush=True)
        if step % args.save_every == 0:
            save(model.eval(), args.out)  # a usable checkpoint if the run is cut short
            if args.keep_checkpoints:  # for accuracy-over-training curves (scripts/eval_demo.py --curve)
                save(model, Path(args.out) / "checkpoints" / f"step{step:05d}")
            model.train()

    model.eval()
    save(model, args.out)
    phases = []
    if args.init and (Path(args.init) / "train_log.json").exists():
        prev = json.loads((Path(args.init) / "train_log.json").read_text())
        phases = prev.get("phases", [prev])
    summary = {"params": n_params, "steps": step, "tokens": tokens, "minutes": round((time.time() - t0) / 60, 1),
               "final_loss": log[-1]["loss"] if log else None, "args": vars(args),
               "torch_threads": torch.get_num_threads(), "log": log}
    summary["phases"] = [{k: v for k, v in p.items() if k != "phases"} for p in phases] + [dict(summary)]
    (Path(args.out) / "train_log.json").write_text(json.dumps(summary, indent=1))
    print(f"saved to {args.out}: {step} steps, {tokens / 1e6:.1f}M tokens, {summary['minutes']} min")


if __name__ == "__main__":
    main()
