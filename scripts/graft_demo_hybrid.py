"""The starting point of demo-hybrid: the trained `demo` model's layers inside demo-hybrid's Nemotron-H layout.

    python scripts/graft_demo_hybrid.py --out /tmp/demo_hybrid_graft
    python scripts/train_demo.py --arch hybrid --init /tmp/demo_hybrid_graft --lr 1e-3 --save-dtype bfloat16 \\
        --out assets/demo_hybrid_model           # then train the new blocks on the demo world

demo-hybrid's Mamba-2 layers have the demo model's shapes (train_demo.hybrid_config), so its four Mamba-2
blocks, embedding, final norm and (untied) head start as the demo model's, and the blocks the demo model
lacks (the attention layer and the MLPs) start with a zero output projection: each adds nothing to the
residual stream, so the grafted model computes exactly the demo model's function (checked here, logits
equal to float rounding) and training only has to teach the new blocks what to add: a warm start for
experiments on the layout in minutes. The shipped demo-hybrid is not made this way: it is trained from
random weights with the demo model's recipe (`python scripts/train_demo.py --arch hybrid --save-dtype
bfloat16`, the demo model's hour on 2 idle cores; its card and docs/hybrid.md).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from picaso_core.light.defaults import count  # noqa: E402  (light: no torch before the arguments are read)


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="folder to write the grafted model to (transformers' nemotron_h layout)")
    ap.add_argument("--base", default="demo", help="the trained pure Mamba-2 model whose layers are grafted in")
    ap.add_argument("--seed", type=count(0), default=0, help="seed of the new blocks' input projections")
    return ap.parse_args(argv)


def graft(base, hybrid) -> list[str]:
    """Copy `base` (SSMLanguageModel, Mamba-2) into `hybrid` (HybridLanguageModel) in place: the i-th Mamba-2
    block of the hybrid gets the base's i-th block; the other blocks' output projections are zeroed.
    Returns the names of the zeroed parameters."""
    import torch  # after the arguments are read: --help stays instant

    from picaso_core.engine.model import Mamba2Mixer

    mambas = [layer for layer in hybrid.model.layers if isinstance(getattr(layer, "mixer", None), Mamba2Mixer)]
    if len(mambas) != len(base.backbone.layers):
        raise ValueError(f"the hybrid has {len(mambas)} Mamba-2 layers, the base model {len(base.backbone.layers)}")
    zeroed = []
    with torch.no_grad():
        vocab = hybrid.embedding.weight.shape[0]
        hybrid.embedding.weight.copy_(base.backbone.embedding.weight[:vocab])
        hybrid.lm_head.weight.copy_(base.lm_head.weight[:vocab])
        hybrid.final_norm.weight.copy_(base.final_norm.weight)
        for dst, src in zip(mambas, base.backbone.layers):
            dst.norm.load_state_dict(src.norm.state_dict())
            dst.mixer.load_state_dict(src.mixer.state_dict())
        for i, layer in enumerate(hybrid.model.layers):
            if layer in mambas:
                continue
            for name, p in layer.named_parameters():
                if name.endswith(("o_proj.weight", "down_proj.weight")):
                    p.zero_()
                    zeroed.append(f"model.layers.{i}.{name}")
    return zeroed


def main(argv=None) -> None:
    args = parse_args(argv)
    import torch  # after the arguments are read

    from picaso_core.engine.hybrid import HybridLanguageModel
    from picaso_core.engine.hybrid_config import HybridConfig
    from picaso_core.engine.loading import load_model, save_model
    from train_demo import hybrid_config

    base = load_model(args.base)
    tok = base.tokenizer
    torch.manual_seed(args.seed)
    hf = hybrid_config(tok.vocab_size, tok.eos_id)
    hf["time_step_min"] = 0.0  # the demo model's Δ is unclamped; Nemotron-H clamps Δ at time_step_min (0.001 by default)
    hybrid = HybridLanguageModel(HybridConfig.from_transformers(hf))
    zeroed = graft(base, hybrid)
    hybrid.tokenizer = tok
    hybrid.eval()
    ids = torch.tensor([tok.encode("The capital of the eastern region is a city on the river.")])
    diff = (hybrid(ids)[0] - base(ids)[0][..., :hybrid.config.vocab_size]).abs().max().item()
    if diff > 1e-4:
        raise SystemExit(f"the grafted model's logits differ from {args.base}'s by {diff:.2e}: the layouts do not match")
    save_model(hybrid, args.out)
    print(f"wrote {args.out}: {args.base}'s {len(base.backbone.layers)} Mamba-2 blocks grafted, {len(zeroed)} output "
          f"projections of new blocks zeroed; logits equal to {args.base}'s within {diff:.1e}")


if __name__ == "__main__":
    main()
