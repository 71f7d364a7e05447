"""Inside a Mamba block (issue 50, picaso_core.lab.block_walk): every stage the walk shows is the engine's
own number. Checked against references the walk does not use, on tiny random models of both families:
the block's output against the residual the next block's norm (or the final norm) receives, read by
this test's own hooks; the state after each token against `encode_context` of that prefix; the conv
window against the prefix's conv state; the read-out against the recorded states and C. And starting
from a stored state equals continuing the context, stage by stage (the prefix invariant)."""

from __future__ import annotations

import base64

import numpy as np
import pytest
import torch

from conftest import tiny_model
from picaso_core.lab import block_walk as bw

IDS = [5, 17, 3, 99, 42, 8, 8, 150, 23, 61, 7, 200, 31]  # longer than the tiny Mamba-2's chunk (8)
PER_TOKEN = ("resid_in", "normed", "in_proj", "pre", "conv", "x", "dt", "B", "C", "y_scan", "y", "z", "gated", "out",
             "resid_out", "h", "decay", "dt_raw")


def _close(a, b, tol=1e-5):
    a, b = torch.as_tensor(a).double(), torch.as_tensor(b).double()
    assert a.shape == b.shape, (a.shape, b.shape)
    err = float((a - b).abs().max()) / max(float(b.abs().max()), 1.0)
    assert err <= tol, err


def _block_inputs(model, ids):
    """What each block's norm receives (the residual stream entering it) and what the final norm
    receives, read by hooks of this test: the reference for each block's output."""
    seen, hooks = [], []
    for norm in [*(b.norm for b in model.backbone.layers), model.backbone.norm_f]:
        hooks.append(norm.register_forward_hook(lambda m, a, out: seen.append(a[0][0].detach().float())))
    try:
        with torch.no_grad():
            hidden, _ = model.hidden_states(torch.tensor([ids]))
    finally:
        for h in hooks:
            h.remove()
    return seen, hidden[0]


@pytest.mark.parametrize("family", ["Mamba2", "Mamba1"])
def test_every_stage_is_the_engines_number(family):
    model = tiny_model(family)
    rec = bw.record(model, IDS)
    inputs, hidden = _block_inputs(model, IDS)
    K = model.config.ssm_cfg.d_conv
    for layer, r in enumerate(rec):
        _close(r["resid_in"], inputs[layer])
        _close(r["resid_out"], inputs[layer + 1])  # the block's output: what the next norm (or norm_f) reads
        for t in range(len(IDS)):  # the state after token t is encode_context of the first t + 1 tokens
            st = model.encode_context(IDS[: t + 1])
            _close(r["h"][t].reshape(st.ssm[layer].shape), st.ssm[layer])
            if t:  # the conv window carried into token t: the last K-1 inputs of the first t tokens
                full = torch.cat([r["conv_in"].T, r["pre"]])
                _close(full[t:t + K - 1].T, model.encode_context(IDS[:t]).conv[layer])
        _close(r["h"][-1], r["h_last"])  # the recurrence's last state is the scan's own
        # the read-out from the walk's states: y = h·C (+ D x) is what the scan (and the skip) gave
        _close(torch.einsum("thpn,thn->thp", r["h"], r["C"]), r["y_scan"], 1e-4)
        _close(r["y"], r["y_scan"] + r["x"] * r["D"][None, :, None], 1e-4)  # the skip: y = h·C + D x
        # in_proj's output is the parts the walk shows, in the engine's order
        parts = [r["z"], r["pre"], r["dt_raw"]] if family == "Mamba2" else [r["pre"], r["z"]]
        _close(torch.cat(parts, -1), r["in_proj"])
        _close(model.backbone.layers[layer].mixer.out_proj(r["gated"]).detach(), r["out"])
    _close(model.backbone.norm_f(rec[-1]["resid_out"]).detach(), hidden)


@pytest.mark.parametrize("family", ["Mamba2", "Mamba1"])
def test_starting_from_a_stored_state_equals_continuing_the_context(family):
    model = tiny_model(family, seed=1)
    ctx, query = IDS[:7], IDS[7:]
    whole = bw.record(model, ctx + query)
    start = model.encode_context(ctx)
    from_state = bw.record(model, query, start)
    for a, b in zip(whole, from_state):
        for key in PER_TOKEN:
            _close(b[key], a[key][len(ctx):], 1e-4)
        _close(b["h0"], a["h"][len(ctx) - 1])  # the start is the context's state, in the walk's own form
        _close(b["conv_in"], torch.cat([a["conv_in"].T, a["pre"]])[len(ctx):len(ctx) + 3].T)


def _unpack(p):
    return torch.from_numpy(np.frombuffer(base64.b64decode(p["f16"]), "<f2").astype(np.float32).reshape(p["shape"]))


@pytest.mark.parametrize("family", ["Mamba2", "Mamba1"])
def test_the_walk_sent_to_the_page_and_the_endpoints_data_are_the_recording(family):
    model = tiny_model(family)
    rec = bw.record(model, IDS)
    layer, head = 1, 1
    sl, n = bw.head_slice(model, head)
    w = bw.walk(model, IDS, layer, head, recorded=rec)
    h = _unpack(w["h"])  # float16 on the wire: three significant digits
    ref = torch.cat([rec[layer]["h0"][None], rec[layer]["h"]])[:, sl]
    ref = ref[:, 0] if family == "Mamba2" else ref[:, :, 0]
    assert h.shape == ref.shape and w["T"] == len(IDS) and w["n_heads"] == n
    _close(h, ref, 2e-3)
    assert "h_zero" not in w
    # from a stored state, h_zero is the same text's walk from zeros (the "difference to zeros" view)
    from_state = bw.walk(model, IDS[7:], layer, head, model.encode_context(IDS[:7]))
    assert from_state["h_zero"] == bw.walk(model, IDS[7:], layer, head)["h"]
    d = bw.token_stages(model, IDS, 4, layer, head, recorded=rec)
    state = d["stages"]["state"]
    # small tensors whole, large ones as their shape and statistics
    assert state["after"]["shape"] == list(rec[layer]["h"][4, sl].shape)
    big = d["stages"]["norm"]["input"] if model.config.d_model > bw.SMALL else bw.summary(torch.zeros(bw.SMALL + 1))
    assert "values" not in big and {"mean", "std", "min", "max", "norm"} <= set(big)
    if "values" in state["after"]:
        _close(state["after"]["values"], rec[layer]["h"][4, sl])
        _close(np.add(state["kept"]["values"], state["added"]["values"]), state["after"]["values"])
    with pytest.raises(ValueError, match="at least one token"):
        bw.record(model, [])
