"""Inside a Mamba block, one token at a time: every stage of one layer's mixer, for every token of a
text, with the engine's own numbers.

Nothing of the mixer is re-implemented. One forward of the text (from any start state) is recorded at
the engine's call sites: the stages the engine shows through its observation API (engine/observe.py:
"conv", "dt", "scan", recorded for this thread only) and forward hooks on the mixer's own modules
(its input, in_proj, dt_proj, the gated norm, out_proj). What the walk adds is display
arithmetic on those recordings: the residual stream (the embedding plus each block's out, as the
engine adds them) and the decay exp(Δ A) of the recorded Δ and A. The state after every token (the
scan returns only the last one) and Mamba-1's read-out with its skip y + D x (its forward adds the
skip inline) are the engine's too: the text is read a second time through the engine's recurrent
`model.step`, one token at a time from the same start, keeping each step's returned state and what
each layer's read-out stage ("readout", state_update) returned (equal to `encode_context` of every
prefix, and to the scan's read-out: tests/lab/test_block_walk.py).

Glossary (the Primer's): T tokens, D d_model, E d_inner, H heads, P head dim, N state size, G groups,
K conv width. A Mamba-1 "head" here is a group of GROUP consecutive channels (each its own state [N]
and its own decay per state dimension), so that both families show a P x N state slice.
"""

from __future__ import annotations

import base64
import contextlib
import threading
from typing import Sequence

import numpy as np
import torch
from torch import Tensor

from picaso_core.engine import observe
from picaso_core.engine.state import ContextState

GROUP = 16  # Mamba-1: channels shown together as one "head"
SMALL = 256  # /block_walk: tensors up to this many numbers are sent whole, larger ones summarised
STAGES = ("norm", "in_proj", "conv", "dt", "state", "readout", "gate", "out")


# ---- recording ------------------------------------------------------------------------------------
@contextlib.contextmanager
def _recorded(model):
    """Record one forward of `model` in this thread: per layer, what each call site saw and returned.
    Yields the list of per-layer dicts (filled as the forward runs) and a dict for the embedding."""
    me, layers, top, cur = threading.get_ident(), [{} for _ in model.layers], {}, [0]

    def mine() -> bool:
        return threading.get_ident() == me

    def note(name, args, out):  # the engine's stages (engine/observe.py), this thread's only
        layers[cur[0]][name] = (args, out)

    def keep(i, name, inputs=False):
        def hook(module, args, out):
            if mine():
                layers[i][name] = (args, out) if inputs else out
        return hook

    def enter(i):
        def pre(module, args):
            if mine():
                cur[0] = i
                layers[i]["u"] = args[0]
        return pre

    handles = [model.embedding.register_forward_hook(lambda m, a, out: top.update(embed=out) if mine() else None)]
    for i, block in enumerate(model.layers):
        mx = block.mixer
        handles.append(mx.register_forward_pre_hook(enter(i)))
        handles.append(mx.in_proj.register_forward_hook(keep(i, "in_proj")))
        handles.append(mx.out_proj.register_forward_hook(keep(i, "out_proj", inputs=True)))
        for name in ("norm", "dt_proj"):  # Mamba-2's gated norm (y + D x, z in); Mamba-1's Δ before softplus
            if isinstance(getattr(mx, name, None), torch.nn.Module):
                handles.append(getattr(mx, name).register_forward_hook(keep(i, name, inputs=True)))
    try:
        with observe.recording(note):
            yield layers, top
    finally:
        for h in handles:
            h.remove()


def _f(t: Tensor) -> Tensor:
    return t.detach().float().cpu()


def record(model, ids: Sequence[int], start: ContextState | None = None,
           layers: Sequence[int] | None = None) -> list[dict]:
    """Every stage of every layer when `model` reads `ids` from `start` (None: zeros), as float32 CPU
    tensors, one dict per layer in one form for both families (b = 1 dropped; a Mamba-1 "head" is a
    channel here, P = 1, regrouped by `walk`):
        resid_in, normed, out, resid_out [T, D]   the block's input, norm(input), out_proj's output, input + out
        in_proj [T, *]                            in_proj's output, as the engine split it into:
        z [T, E], pre [T, C] (the conv's input channels: Mamba-2 x|B|C, Mamba-1 x), dt_raw [T, H] (before softplus)
        conv_in [C, K-1] (the window carried in), conv [T, C] (SiLU(conv), the conv's output)
        x [T, H, P], dt [T, H], A [H, N], B, C [T, H, N]   the scan's inputs (B, C per head: Mamba-2 groups repeated)
        y_scan [T, H, P] (C·h, the scan's output), y [T, H, P] (+ D x), gated [T, E] (out_proj's input)
        h0 [H, P, N], h [T, H, P, N] (the state after each token), h_last [H, P, N] (the scan's own last state)
        D [H] (Mamba-1: [E]), decay [T, H, N] = exp(Δ A).
    `layers`: the layers whose states after each token are made (`h`; default all): T x H x P x N floats
    a layer, 2.4 GB for 48 tokens of a 48-layer Mamba-2 370m, so the UI asks for the layer it shows."""
    ids = torch.as_tensor(list(ids), dtype=torch.long)
    if ids.dim() != 1 or ids.numel() == 0:
        raise ValueError("give at least one token")
    cfg, m2 = model.config, model.layout.ssm_kind == "mamba2"  # a pure model (the walk's views refuse a hybrid)
    # on CUDA a forward without autograd may replay a CUDA graph (no Python call sites run): keep autograd on there
    with torch.set_grad_enabled(model.device.type == "cuda"), _recorded(model) as (recorded, top):
        model.hidden_states(ids[None].to(model.device), start)
    resid = top["embed"][0]
    resid = resid.float() if cfg.residual_in_fp32 and resid.dtype != torch.float64 else resid
    out, wanted = [], set(range(cfg.n_layer) if layers is None else layers)
    for i, (L, block) in enumerate(zip(recorded, model.layers)):
        mx = block.mixer
        (cx, _w, _b, cstate, *_), (conv_y, _) = L["conv"]
        scan_args, (y_scan, h_last, _) = L["scan"]
        x, dt, A, B, C = (_f(t) for t in scan_args[:5])
        h0 = scan_args[-1] if len(scan_args) > 5 else None
        o = {"resid_in": _f(resid), "normed": _f(L["u"][0]), "in_proj": _f(L["in_proj"][0]),
             "pre": _f(cx[0]).T, "conv_in": _f(cstate[0]), "conv": _f(conv_y[0]).T,
             "out": _f(L["out_proj"][1][0]), "gated": _f(L["out_proj"][0][0][0])}
        resid = resid + L["out_proj"][1][0].to(resid.dtype)  # the residual add, as the engine's _add_norm
        o["resid_out"] = _f(resid)
        if m2:  # x [1,T,H,P], dt [1,T,H], A [H], B, C [1,T,G,N], y [1,T,H,P], h0 [1,H,P,N]
            H, r = x.shape[2], x.shape[2] // B.shape[2]
            (norm_args, _) = L["norm"]
            o.update(x=x[0], dt=dt[0], A=A[:, None].expand(H, B.shape[-1]).clone(),
                     B=B[0].repeat_interleave(r, 1), C=C[0].repeat_interleave(r, 1), y_scan=_f(y_scan[0]),
                     y=_f(norm_args[0][0]).unflatten(-1, (H, -1)), z=_f(norm_args[1][0]),
                     dt_raw=_f(L["dt"][0][0][0]), D=_f(mx.D), h_last=_f(h_last[0]))
        else:  # u, delta [1,E,T], A [E,N], B, C [1,N,T], y [1,E,T], h0 [1,E,N]
            E = x.shape[1]
            Dp = _f(mx.D)
            o.update(x=x[0].T[..., None], dt=dt[0].T, A=A, B=B[0].T[:, None].expand(-1, E, -1).clone(),
                     C=C[0].T[:, None].expand(-1, E, -1).clone(), y_scan=_f(y_scan[0]).T[..., None],
                     z=o["in_proj"][:, E:], dt_raw=_f(L["dt_proj"][1][0]), D=Dp, h_last=_f(h_last[0])[:, None])
        o["h0"] = (torch.zeros_like(o["h_last"]) if h0 is None else
                   _f(h0[0]) if m2 else _f(h0[0])[:, None])
        o["decay"] = torch.exp(o["dt"][..., None] * o["A"])  # [T, H, N]
        out.append(o)
    order = sorted(wanted)
    h, y = stepped(model, ids, start, order)
    for j, i in enumerate(order):
        out[i]["h"] = h[:, j] if m2 else h[:, j, :, None]  # Mamba-1 [T, E, N] -> [T, E, 1, N]
    if not m2:  # the read-out with its skip, as the step's state_update returned it (before the gate)
        for i, o in enumerate(out):
            o["y"] = y[:, i, :, None]
    return out


def stepped(model, ids: Tensor | Sequence[int], start: ContextState | None,
            layers: Sequence[int]) -> tuple[Tensor, Tensor]:
    """The states of `layers` after every token of `ids`, and every layer's read-out, as the engine's
    recurrent decode makes them: `model.step` one token at a time from `start` (None: zeros), keeping
    each returned state's SSM part and what each layer's read-out stage returned (y = C·h + D·x,
    recorded at the engine's call site for this thread, engine/observe.py). Returns
    h [T, len(layers), H, P, N] (Mamba-1 [T, len(layers), E, N]; a state is large: 48 tokens of every
    layer of a Mamba-2 370m are 2.4 GB) and y [T, L, H, P] (Mamba-1 [T, L, E]), float32 CPU."""
    layers = list(layers)
    ys = []

    def note(name, args, out):  # the read-out stage of each layer's step, in layer order (engine/observe.py)
        if name == "readout":
            ys.append(_f(out[0]))  # one row

    hs, st = [], start
    with torch.no_grad(), observe.recording(note):
        for tok in torch.as_tensor(list(ids), dtype=torch.long):
            _, st = model.step(tok[None].to(model.device), st)
            hs.append(_f(st.ssm[0, layers]))
    L = model.config.n_layer
    if len(ys) != L * len(hs):
        raise RuntimeError(f"recorded {len(ys)} read-outs for {len(hs)} tokens x {L} layers")
    return torch.stack(hs), torch.stack(ys).unflatten(0, (len(hs), L))


# ---- the UI's walk: one layer and head, every token, packed for the browser ----------------------
def _pack(t: Tensor) -> dict:
    """A tensor as float16 bytes in base64 with its shape: a third of JSON's size for the browser."""
    a = np.clip(t.detach().cpu().numpy().astype(np.float32), -65504, 65504).astype("<f2")
    return {"shape": list(a.shape), "f16": base64.b64encode(a.tobytes()).decode()}


def head_slice(model, head: int) -> tuple[slice, int]:
    """The heads (scan rows) a walk's `head` shows: Mamba-2 the head itself, Mamba-1 GROUP channels."""
    if model.layout.ssm_kind == "mamba2":
        return slice(head, head + 1), model.config.nheads
    E = model.config.d_inner
    return slice(head * GROUP, min(E, (head + 1) * GROUP)), -(-E // GROUP)


def n_heads(model) -> int:
    return head_slice(model, 0)[1]


def walk(model, ids: Sequence[int], layer: int, head: int, start: ContextState | None = None,
         tokens: Sequence[str] | None = None, recorded: list[dict] | None = None) -> dict:
    """Plain data for the browser's walk through one layer and head, every token: the stages' numbers
    (`_pack`ed), the tokens, the dims. With a start state, `h_zero` is the same walk's state from zeros
    (the "difference to zeros" view; the engine's steps alone, `stepped`). `recorded`: `record`'s
    result, when already made."""
    cfg, fam, m2 = model.config, model.config.family, model.layout.ssm_kind == "mamba2"  # fam: data for the page
    rec = (recorded or record(model, ids, start, [layer]))[layer]
    sl, _ = head_slice(model, head)
    E, N, K = cfg.d_inner, cfg.ssm_cfg.d_state, cfg.ssm_cfg.d_conv
    if m2:
        P, G, GN = cfg.ssm_cfg.headdim, cfg.ssm_cfg.ngroups, cfg.ssm_cfg.ngroups * N
        g = head // (cfg.nheads // G)
        chans = [*range(head * P, (head + 1) * P), *range(E + g * N, E + (g + 1) * N), *range(E + GN + g * N, E + GN + (g + 1) * N)]
        flat = lambda t: t[:, sl].reshape(t.shape[0], -1)  # noqa: E731  [T, 1, P] -> [T, P]
        D = rec["D"][head:head + 1]
        ch = slice(head * P, (head + 1) * P)
        data = {"dt_all": rec["dt"], "decay_all": rec["decay"][..., 0], "dt_raw": rec["dt_raw"][:, head:head + 1]}
    else:
        chans = list(range(sl.start, sl.stop))
        flat = lambda t: t[:, sl, 0]  # noqa: E731  [T, E, 1] -> [T, channels]
        D, ch = rec["D"][sl], sl
        data = {"dt_all": rec["dt"][:, sl], "decay_all": rec["decay"][:, sl], "dt_raw": rec["dt_raw"][:, sl]}
    win = torch.cat([rec["conv_in"][chans].T, rec["pre"][:, chans]])  # [K-1+T, channels]
    h = torch.cat([rec["h0"][None], rec["h"]])[:, sl]  # [T+1, heads, P, N]
    h = h[:, 0] if m2 else h[:, :, 0]  # [T+1, P, N] (Mamba-1: [T+1, channels, N])
    data.update(resid_in=rec["resid_in"], normed=rec["normed"], out=rec["out"], x=flat(rec["x"]),
                z=rec["z"][:, ch], B=rec["B"][:, sl.start], C=rec["C"][:, sl.start], win=win, conv=rec["conv"][:, chans],
                y_scan=flat(rec["y_scan"]), y=flat(rec["y"]), gated=rec["gated"][:, ch], h=h,
                hnorm=torch.cat([rec["h0"][None], rec["h"]]).flatten(2).norm(dim=-1))
    if start is not None:
        hz = stepped(model, ids, None, [layer])[0][:, 0, sl]  # [T, heads, P, N] (Mamba-1: [T, channels, N])
        hz = torch.cat([torch.zeros_like(hz[:1]), hz])  # the walk from zeros starts at zeros
        data["h_zero"] = hz[:, 0] if m2 else hz
    out = {k: _pack(v) for k, v in data.items()}
    A = rec["A"][sl]
    out.update(family=fam, layer=layer, head=head, n_layers=cfg.n_layer, n_heads=n_heads(model),
               tokens=list(tokens) if tokens is not None else [str(i) for i in ids], T=len(ids), K=K,
               dims={"D": cfg.d_model, "E": E, "N": N, "P": h.shape[1], "H": rec["dt"].shape[1],
                     "conv_channels": len(chans)},
               parts=({"x": h.shape[1], "B": N, "C": N} if m2 else {"x": h.shape[1]}),
               A=A[0, 0].item() if m2 else A.tolist(), Dskip=D.tolist(),
               channels=[sl.start, sl.stop - 1] if not m2 else None)
    return out


# ---- /block_walk: one token and layer, every stage as plain data -----------------------------------
def summary(t: Tensor, small: int = SMALL) -> dict:
    """A tensor as plain data: whole (shape + values) when it has at most `small` numbers, else its shape
    and statistics."""
    t = t.detach().float().cpu()
    if t.numel() <= small:
        return {"shape": list(t.shape), "values": t.tolist()}
    return {"shape": list(t.shape), "mean": float(t.mean()), "std": float(t.std()), "min": float(t.min()),
            "max": float(t.max()), "norm": float(t.norm())}


def token_stages(model, ids: Sequence[int], token: int, layer: int, head: int = 0,
                 start: ContextState | None = None, recorded: list[dict] | None = None) -> dict:
    """Every stage of `layer` for token `token` (0-based) of `ids`, for one head (Mamba-1: a group of
    GROUP channels), as plain data (`summary`): what /block_walk returns."""
    rec = (recorded or record(model, ids, start, [layer]))[layer]
    fam, K = model.config.family, model.config.ssm_cfg.d_conv
    sl, _ = head_slice(model, head)
    t = token
    full = torch.cat([rec["conv_in"].T, rec["pre"]])  # [K-1+T, C]
    before = (rec["h0"] if t == 0 else rec["h"][t - 1])[sl]
    kept = rec["decay"][t, sl][:, None, :] * before  # a·h: decay [heads, N] over h [heads, P, N] (Mamba-1: P = 1)
    after = rec["h"][t, sl]
    s = {
        "norm": {"input": summary(rec["resid_in"][t]), "output": summary(rec["normed"][t])},
        "in_proj": {"output": summary(rec["in_proj"][t]), "z": summary(rec["z"][t]), "conv_input": summary(rec["pre"][t]),
                    "dt_raw": summary(rec["dt_raw"][t])},
        "conv": {"window": summary(full[t:t + K]), "output": summary(rec["conv"][t]),
                 "carried_out": summary(full[t + 1:t + K])},
        "dt": {"dt": summary(rec["dt"][t]), "A": summary(rec["A"][sl]), "decay": summary(rec["decay"][t, sl])},
        "state": {"before": summary(before), "kept": summary(kept), "added": summary(after - kept),
                  "after": summary(after), "x": summary(rec["x"][t, sl]), "B": summary(rec["B"][t, sl.start]),
                  "C": summary(rec["C"][t, sl.start])},
        "readout": {"y_scan": summary(rec["y_scan"][t, sl]), "D": summary(rec["D"][sl]),
                    "y": summary(rec["y"][t, sl])},
        "gate": {"z": summary(rec["z"][t]), "gated": summary(rec["gated"][t])},
        "out": {"out": summary(rec["out"][t]), "block_output": summary(rec["resid_out"][t])},
    }
    return {"family": fam, "layer": layer, "head": head, "token": token, "stages": s}
