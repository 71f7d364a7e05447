"""Context encoding throughput and state sizes.

    python bench/engine_speed.py            # mamba2-130m shape, random weights, float32, CPU
    python bench/engine_speed.py --quick    # a smaller model, for a smoke run
    python bench/engine_speed.py --device cuda --dtype bfloat16   # GPU, next to the peak-FLOPs floor

Measured side by side in one run (interleaved rounds), on the same weights:
  * batched `encode_contexts` (32 contexts x 128 tokens, one padded batch)
  * the same contexts through `encode_context` one at a time
  * transformers' Mamba2 backbone (Mamba2Model.forward, no lm_head: the same work as encoding)
Prints tokens/s and ratios (medians of --repeats). These 2-core machines are shared and noisy:
quote the ratios; absolute times only on a quiet machine or a GPU.

Also prints the table of state bytes per context for the released Mamba / Mamba-2 checkpoints
(from their configs) next to the KV cache per token of a transformer of similar size (Pythia).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import interleaved, limits, medians, parse, parser, ratios, table, vs_limit, write_json  # noqa: E402

from picaso_core import ModelConfig  # noqa: E402
from picaso_core.light.defaults import count  # noqa: E402

if TYPE_CHECKING:  # the model imports torch: main imports it after the arguments are read (issue 48)
    from picaso_core import SSMLanguageModel

# (name, d_model, n_layer) of the released checkpoints (their config.json files)
MAMBA2 = [("mamba2-130m", 768, 24), ("mamba2-370m", 1024, 48), ("mamba2-780m", 1536, 48),
          ("mamba2-1.3b", 2048, 48), ("mamba2-2.7b", 2560, 64)]
MAMBA1 = [("mamba-130m", 768, 24), ("mamba-370m", 1024, 48), ("mamba-790m", 1536, 48),
          ("mamba-1.4b", 2048, 48), ("mamba-2.8b", 2560, 64)]
# Pythia (GPT-NeoX, the same tokenizer) of matching size: (name, n_layer, d_model)
PYTHIA = [("pythia-160m", 12, 768), ("pythia-410m", 24, 1024), ("pythia-1b", 16, 2048),
          ("pythia-1.4b", 24, 2048), ("pythia-2.8b", 32, 2560)]


def mamba2_130m_config(quick: bool) -> ModelConfig:
    if quick:
        return ModelConfig(d_model=256, n_layer=4, vocab_size=50277, pad_vocab_size_multiple=16,
                           ssm_cfg=dict(layer="Mamba2", headdim=64))
    return ModelConfig(d_model=768, n_layer=24, vocab_size=50277, pad_vocab_size_multiple=16,
                       ssm_cfg=dict(layer="Mamba2"))


def transformers_twin(model: SSMLanguageModel):
    """transformers' Mamba2Model holding exactly `model`'s weights (backbone only)."""
    import transformers

    c = model.config
    s = c.ssm_cfg
    hf_cfg = transformers.Mamba2Config(
        vocab_size=c.padded_vocab_size, hidden_size=c.d_model, num_hidden_layers=c.n_layer,
        state_size=s.d_state, expand=s.expand, head_dim=s.headdim, num_heads=c.nheads,
        n_groups=s.ngroups, conv_kernel=s.d_conv, chunk_size=s.chunk_size, tie_word_embeddings=True)
    hf = transformers.Mamba2Model(hf_cfg).eval()
    sd = {k.removeprefix("backbone.").replace("embedding.", "embeddings."): v
          for k, v in model.state_dict().items() if k.startswith("backbone.")}
    hf.load_state_dict(sd, strict=True)
    return hf


def state_size_table() -> str:
    rows = []
    for (m2, m1), (pname, pl, pd) in zip(zip(MAMBA2, MAMBA1), PYTHIA):
        kv = 2 * pl * pd * 2  # K and V, per layer, fp16
        for name, d, L in (m2, m1):
            layer = "Mamba2" if name.startswith("mamba2") else "Mamba1"
            nbytes = ModelConfig(d_model=d, n_layer=L, ssm_cfg=dict(layer=layer)).state_nbytes()
            rows.append([name, f"{nbytes / 2**20:.1f} MiB", pname, f"{kv / 2**10:.0f} KiB", f"{nbytes / kv:,.0f}"])
    return table(rows, ["model", "state per context (fp32)", "transformer of similar size", "KV cache per token (fp16)",
                        "tokens of KV cache = one state"])


def main(argv=None) -> None:
    ap = parser(__doc__, device="cpu", repeats=3, quick="a smaller model (d_model 256, 4 layers)", limit_flags=True)
    ap.add_argument("--contexts", type=count(2), default=32)  # parity reads the first two
    ap.add_argument("--tokens", type=count(1), default=128)
    ap.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32")
    args = parse(ap, argv)
    import torch

    from picaso_core import SSMLanguageModel

    torch.manual_seed(0)
    dtype = getattr(torch, args.dtype)
    model = SSMLanguageModel(mamba2_130m_config(args.quick)).eval()
    hf = transformers_twin(model).to(args.device, dtype)
    model.to(args.device, dtype)
    ctx = torch.randint(0, 50277, (args.contexts, args.tokens), device=args.device)
    n_tok = ctx.numel()

    with torch.no_grad():
        # parity first: the comparison is only meaningful if both compute the same thing
        ours_h, _ = model.hidden_states(ctx[:2])
        ref_h = hf(ctx[:2]).last_hidden_state
        parity = (ours_h - ref_h).abs().max().item()
        model.encode_contexts(ctx[:2].tolist())  # warm-up
        t = medians(interleaved({"batched": lambda: model.encode_contexts(list(ctx), batch_size=args.contexts),
                                 "single": lambda: [model.encode_context(c) for c in ctx],
                                 "transformers": lambda: hf(ctx)},
                                args.repeats, warmup=False, rounds={"single": max(1, args.repeats - 1)}))
    vs = ratios(t, "batched")

    params = sum(p.numel() for p in model.parameters())
    _, peak, label = limits(args.device, args.dtype, args)
    print(f"model: d_model={model.config.d_model} n_layer={model.config.n_layer} "
          f"({params / 1e6:.0f}M params), {args.dtype}, {args.device}, "
          f"{torch.get_num_threads()} threads; {args.contexts} contexts x {args.tokens} tokens; limits: {label}")
    # a forward costs ~2 FLOPs per weight per token (the scan's own FLOPs are small next to it)
    print(f"batched encode vs the peak-FLOPs floor: {vs_limit(t['batched'], 2 * params * n_tok / peak if peak else None)}")
    print(f"hidden-state parity with transformers: max |diff| = {parity:.2e}\n")
    names = {"batched": "encode_contexts (batched)", "single": "encode_context one at a time",
             "transformers": "transformers Mamba2Model.forward (batched)"}
    print(table([[names[k], f"{n_tok / v:,.0f}", f"{vs[k]:.2f}x time"] for k, v in t.items()],
                ["path", "tokens/s", "vs batched encode_contexts"]))
    print(f"\nbatched / one-at-a-time speedup: {vs['single']:.2f}x;  "
          f"batched vs transformers: {vs['transformers']:.2f}x (>= 1 means ours is at least as fast)\n")
    print(state_size_table())
    write_json(args, {"seconds": t, "tokens_per_s": {k: n_tok / v for k, v in t.items()}, "params": params,
                      "parity_max_abs_diff": parity}, vs)


if __name__ == "__main__":
    main()
