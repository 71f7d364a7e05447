"""Layer kind "mlp": the dense MLPs of the hybrids, in each family's weight names.

    UpDownMLP    Nemotron-H:  down(act(up(x)))                    act relu² (relu(x)²)
    GatedMLP     Bamba:       down(act(gate(x)) * up(x))          act SiLU
    GraniteMLP   Granite-4.0-H: output_linear(act(a) * b), [a, b] = input_linear(x)
They act on the last dimension of x [..., D] and carry no state: a token's output depends on that
token alone, so a context's state never holds anything of them.
"""

from __future__ import annotations

import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from picaso_core.engine.layers.kind import LayerKind, stateless_chunk

def relu2(x: Tensor) -> Tensor:
    return F.relu(x).square()


def gelu_tanh(x: Tensor) -> Tensor:
    return F.gelu(x, approximate="tanh")


# module-level functions, not lambdas: a module holding one (self.act) pickles, and so does its model
ACT = {"silu": F.silu, "relu": F.relu, "relu2": relu2, "gelu": F.gelu, "gelu_pytorch_tanh": gelu_tanh}


class UpDownMLP(nn.Module):
    def __init__(self, d: int, inner: int, act: str, bias: bool = False):
        super().__init__()
        self.up_proj, self.down_proj = nn.Linear(d, inner, bias=bias), nn.Linear(inner, d, bias=bias)
        self.act = ACT[act]

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(self.act(self.up_proj(x)))


class GatedMLP(nn.Module):
    def __init__(self, d: int, inner: int, act: str, bias: bool = False):
        super().__init__()
        self.gate_proj, self.up_proj = nn.Linear(d, inner, bias=bias), nn.Linear(d, inner, bias=bias)
        self.down_proj = nn.Linear(inner, d, bias=bias)
        self.act = ACT[act]

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


class GraniteMLP(nn.Module):
    def __init__(self, d: int, inner: int, act: str):
        super().__init__()
        self.input_linear, self.output_linear = nn.Linear(d, 2 * inner, bias=False), nn.Linear(inner, d, bias=False)
        self.act = ACT[act]

    def forward(self, x: Tensor) -> Tensor:
        a, b = self.input_linear(x).chunk(2, dim=-1)
        return self.output_linear(self.act(a) * b)


# ---- the kind ---------------------------------------------------------------------------------
def _build(cfg) -> nn.Module:
    D, inner, act, bias = cfg.d_model, cfg.intermediate_size, cfg.mlp_act, cfg.mlp_bias
    if cfg.model_type == "granitemoehybrid":
        return GraniteMLP(D, inner, act)
    return (UpDownMLP if cfg.model_type == "nemotron_h" else GatedMLP)(D, inner, act, bias)


KIND = LayerKind("mlp", "MLP", None, _build, stateless_chunk, stateless_chunk,
                 {"nemotron_h": "mixer", "granitemoehybrid": "shared_mlp", "bamba": "feed_forward"})
