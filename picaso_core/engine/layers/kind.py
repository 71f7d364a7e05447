"""The contract every layer kind keeps, and the runs its calls read and write.

A kind is one module under engine/layers/ that defines its nn.Module classes and one `KIND` record:
    name, label      "mamba2", "Mamba-2": what the Layout and the app call it
    state            the part of a ContextState it holds: "ssm" (ssm, conv, log_decay stacked over the
                     SSM layers), "kv" (keys, values stacked over the attention layers) or None
    build(cfg)       its module for a config (a family's config: ModelConfig or HybridConfig)
    part(cfg)        its part of one context's state: tensor name -> shape for ONE layer of this kind
                     ({} for a kind with no state); the Layout stacks them over the kind's layers
    chunk(mods, x, run) -> out   forward over a chunk [b, t, D] from its part of `run` (a ChunkRun),
                     appending its new part there
    step(mods, x, run) -> out    one token [b, D]; its part of `run` (a StepRun) updated in place
    weights          family -> the sub-block's module name in a checkpoint layer (the weight names
                     start "<layer prefix>.<i>.<that name>.")
The model (engine/model.py) runs every layer's sub-blocks in order, norm -> kind.chunk / kind.step ->
residual add, and never asks which kind it runs. `mods` is the sub-block's modules (a Granite layer's
feed-forward sums its MoE and its shared MLP; every other sub-block has one).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

import torch
from torch import Tensor

STATE_PARTS = {"ssm": ("ssm", "conv", "log_decay"), "kv": ("keys", "values")}


def no_part(cfg) -> dict:
    """A kind with no state holds no part of one (module-level, so a model pickles)."""
    return {}


@dataclass(frozen=True)
class LayerKind:
    name: str
    label: str
    state: str | None
    build: Callable
    chunk: Callable
    step: Callable
    weights: Mapping[str, str] = field(default_factory=dict)
    part: Callable = no_part


class ChunkRun:
    """A forward over a chunk: the batched state read from (inputs) and each stateful layer's new part
    (outputs, appended in layer order). kv: (keys, values, kv_lengths, total) where the model has
    attention layers, else None."""

    def __init__(self, ssm: Tensor, conv: Tensor, log_decay: Tensor, lengths: Tensor | None, kv=None):
        self.ssm_in, self.conv_in, self.log_decay_in, self.lengths = ssm, conv, log_decay, lengths
        self.ssm: list[Tensor] = []
        self.conv: list[Tensor] = []
        self.decay: list[Tensor] = []
        self.keys: list[Tensor] = []
        self.values: list[Tensor] = []
        if kv is not None:
            self.keys_in, self.values_in, kv_lengths, self.total = kv
            self.kv_len = torch.tensor(kv_lengths, dtype=torch.long, device=ssm.device)
            self.aligned = all(n == self.keys_in.shape[-2] for n in kv_lengths)


class StepRun:
    """One recurrent step: the state buffers [b, L, ...] (layer_major) each SSM layer updates in place,
    the key-value cache (None without attention layers), and how many layers of each part ran."""

    def __init__(self, ssm: Tensor, conv: Tensor, log_decay: Tensor, cache=None):
        self.ssm, self.conv, self.log_decay, self.cache = ssm, conv, log_decay, cache
        self.i = 0  # SSM layers stepped
        self.a = 0  # attention layers stepped


def stateless_chunk(mods, x: Tensor, run) -> Tensor:
    """A sub-block with no state (MLP, MoE): the sum of its modules' outputs, the same in a chunk and a step."""
    out = mods[0](x)
    for m in mods[1:]:
        out = out + m(x)
    return out


def ssm_chunk(mods, x: Tensor, run: ChunkRun) -> Tensor:
    """A Mamba mixer's chunk (kinds "mamba1", "mamba2"): its layer's slice of the SSM part in, its new
    conv window, SSM state and log-decay appended (the decay in the state's per-layer shape: Mamba-2's
    [b, H] as [b, H, 1, 1], Mamba-1's [b, E, N] as it is)."""
    i = len(run.ssm)
    out, conv, ssm, log_decay = mods[0](x, run.conv_in[:, i], run.ssm_in[:, i], run.lengths)
    run.conv.append(conv)
    run.ssm.append(ssm.to(conv.dtype))
    run.decay.append(log_decay.view(x.shape[0], *run.log_decay_in.shape[2:]))
    return out


def ssm_step(mods, x: Tensor, run: StepRun) -> Tensor:
    """A Mamba mixer's recurrent step: its layer's slice of the SSM buffers updated in place."""
    i = run.i
    run.i += 1
    return mods[0].step(x, run.conv[:, i], run.ssm[:, i], run.log_decay[:, i])
