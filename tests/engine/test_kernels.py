"""Kernel selection and the query-path CUDA graphs, the parts that run without a GPU.

engine/kernels.py decides which ops run an optional GPU kernel; engine/graphs.py replays short
forwards as CUDA graphs on padded inputs. On CPU: the selection says which path runs (the model's
repr), the switch turns the kernels off, a Triton-only mamba-ssm install (whose package __init__
cannot import) still yields its kernels, a failing kernel falls back once and says so, and the
padded, length-masked forward a graph replays equals the plain forward.
"""

import ast
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from picaso_core.engine import graphs, kernels
from tests.conftest import TINY_VOCAB, tiny_model


@pytest.fixture
def fake_kernels(monkeypatch):
    """Every kernel 'installed' (stand-ins that must never be called on CPU), none broken."""
    def never(*a, **k):
        raise AssertionError("a kernel ran on a CPU tensor")
    monkeypatch.setattr(kernels, "_KERNELS", {op: never for op in kernels.OPS})
    monkeypatch.setattr(kernels, "broken", {})
    monkeypatch.setattr(kernels, "ENABLED", True)
    monkeypatch.setattr(kernels, "ALLOWED", frozenset(kernels.OPS))
    return never


def test_cpu_model_says_pure_torch():
    m = tiny_model("Mamba2")
    assert "pure torch (cpu" in m.kernel_path()
    assert m.kernel_path() in repr(m)


def test_describe_names_each_path(fake_kernels, monkeypatch):
    assert kernels.describe("cuda", "Mamba2") == "kernels: ssd, step, norm, addnorm, conv, conv_step, dt_step, conv_roll, conv_dt"
    # Mamba-1's prefill scan has no Triton kernel: it says so; dt_step and conv_dt are Mamba-2's
    assert kernels.describe("cuda", "Mamba1") == ("kernels: step, addnorm, conv, conv_step, conv_roll; "
                                                  "Mamba-1 prefill scan: pure torch")
    monkeypatch.setitem(kernels._KERNELS, "conv", None)
    monkeypatch.setitem(kernels._KERNELS, "conv_step", None)
    assert kernels.describe("cuda") == ("kernels: ssd, step, norm, addnorm, dt_step, conv_roll, conv_dt; pure torch: conv, "
                                        "conv_step (causal-conv1d not installed)")
    kernels.use_kernels(True, {"ssd", "step"})
    assert kernels.describe("cuda") == ("kernels: ssd, step; pure torch: norm, addnorm, conv, conv_step, dt_step, "
                                        "conv_roll, conv_dt (PICASO_KERNELS leaves it out; causal-conv1d not installed)")
    assert kernels.get("norm", torch.zeros(1).as_subclass(CudaLike)) is None
    assert kernels.get("ssd", torch.zeros(1).as_subclass(CudaLike)) is fake_kernels
    kernels.use_kernels(False)
    assert kernels.describe("cuda") == "pure torch (kernels switched off: PICASO_KERNELS=torch)"
    assert kernels.active("cuda") == {op: False for op in kernels.OPS}


def test_kernels_never_run_on_cpu_tensors(fake_kernels):
    m = tiny_model("Mamba2")
    st = m.encode_context(torch.randint(0, TINY_VOCAB, (11,)))
    m.step(torch.tensor([3, 4]), st)  # the stand-ins raise if called
    for op in kernels.OPS:
        assert kernels.get(op, torch.zeros(1)) is None


def test_a_failing_kernel_falls_back_and_says_so(fake_kernels, caplog, monkeypatch):
    monkeypatch.setattr(kernels, "_failed", set())
    x, y = torch.zeros(2), torch.zeros(3, 4)
    tries = []

    def bad(*a, **k):
        tries.append(a)
        raise RuntimeError("no kernel image is available")
    before = kernels.calls["ssd"]
    with caplog.at_level("WARNING"):
        assert kernels.run("ssd", bad, x) is None
    assert "ssd" in kernels.broken and "no kernel image" in kernels.broken["ssd"]
    assert "pure-torch path runs for such inputs" in caplog.text
    assert kernels.run("ssd", bad, x + 1) is None and len(tries) == 1  # that kind of input: not retried
    assert kernels.run("ssd", bad, y) is None and len(tries) == 2  # another kind is tried
    assert kernels.calls["ssd"] == before
    assert "failed on some inputs, pure torch there: ssd (RuntimeError: no kernel image" in kernels.describe("cuda")
    assert kernels.run("step", lambda v: v + 1, x).tolist() == [1.0, 1.0]
    assert kernels.calls["step"] >= 1


class CudaLike(torch.Tensor):  # a CPU tensor that claims CUDA: get() decides on is_cuda, grad and the switch
    @property
    def is_cuda(self):
        return True


def test_kernels_stand_aside_while_autograd_records(fake_kernels, monkeypatch):
    w = torch.zeros(3, requires_grad=True)
    t = (w * 2).as_subclass(CudaLike)
    assert kernels.get("ssd", t) is None  # a training forward keeps the reference's gradients
    with torch.no_grad():
        assert kernels.get("ssd", (w * 2).as_subclass(CudaLike)) is fake_kernels


FAKE_MAMBA = {
    "mamba_ssm/__init__.py": "import selective_scan_cuda  # the CUDA build a Triton-only install lacks\n",
    "mamba_ssm/ops/__init__.py": "",
    "mamba_ssm/ops/triton/__init__.py": "",
    "mamba_ssm/ops/triton/ssd_combined.py": "def mamba_chunk_scan_combined(*a, **k):\n    return 'ssd'\n",
    "mamba_ssm/ops/triton/selective_state_update.py": "def selective_state_update(*a, **k):\n    return 'step'\n",
    "mamba_ssm/ops/triton/layernorm_gated.py": "def rmsnorm_fn(*a, **k):\n    return 'norm'\n",
    "mamba_ssm/ops/triton/layer_norm.py": "def rms_norm_fn(*a, **k):\n    return 'addnorm'\n",
}


def _probe(tmp_path, env_extra=None) -> str:
    for rel, text in FAKE_MAMBA.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    code = textwrap.dedent("""
        from picaso_core.engine import kernels
        print(sorted(op for op, ok in kernels.installed().items() if ok), kernels.ENABLED)
        print(kernels._KERNELS["ssd"](), kernels.import_errors.get("mamba_ssm", ""))
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.getcwd()]), **(env_extra or {})}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_triton_only_install_is_found(tmp_path):
    """mamba_ssm's __init__ imports selective_scan_cuda, absent in a MAMBA_SKIP_CUDA_BUILD install:
    the Triton kernels are still found, and why the package itself did not import is kept."""
    out = _probe(tmp_path)
    found, enabled = out.splitlines()[0].rsplit(" ", 1)
    # mamba-ssm's four; picaso's own Triton ops (dt_step, conv_roll) also where a GPU is there
    assert {"addnorm", "norm", "ssd", "step"} <= set(ast.literal_eval(found)) and enabled == "True"
    assert not {"conv", "conv_step"} & set(ast.literal_eval(found))  # causal-conv1d is not in the fake
    assert "ssd" in out.splitlines()[1] and "selective_scan_cuda" in out


def test_environment_switch(tmp_path):
    assert "True" not in _probe(tmp_path, {"PICASO_KERNELS": "torch"}).splitlines()[0]


def test_the_switch_takes_a_subset_and_refuses_unknown_ops(monkeypatch):
    assert kernels._parse("auto") == (True, frozenset(kernels.OPS))
    assert kernels._parse("off") == (False, frozenset())
    assert kernels._parse(" ssd, step ") == (True, frozenset({"ssd", "step"}))
    with pytest.raises(ValueError, match="unknown ops.*'scan'"):
        kernels._parse("ssd,scan")
    before = kernels.setting()
    with pytest.raises(ValueError, match="unknown kernel ops"):
        kernels.use_kernels(False, {"flash"})
    assert kernels.setting() == before  # a refused switch changes nothing


# ---- the query graphs' padding, checked eagerly -------------------------------------------------
def test_bucket_and_padding():
    assert [graphs.bucket(t) for t in (1, 16, 17, 64, 65, 128)] == [16, 16, 32, 64, 128, 128]
    assert graphs.bucket(129) is None
    with pytest.raises(ValueError):
        graphs.bucket(0)
    m = tiny_model("Mamba2")
    st = m._batched_state(m.encode_context([1, 2, 3, 4]), 2)
    inputs = graphs._Inputs(m, 2, st.ssm, st.conv, st.log_decay)  # what every graph of 2 rows reads
    ids = torch.tensor([[5, 6, 7], [8, 9, 10]])
    inputs.ids.fill_(99)  # a longer forward's ids left in the buffer
    inputs.load(ids, None, st.ssm, st.conv, st.log_decay)
    padded = inputs.ids[:, :graphs.bucket(3)]
    assert padded.shape == (2, 16) and padded[:, 3:].eq(0).all() and padded[:, :3].equal(ids)
    assert inputs.lengths.tolist() == [3, 3] and torch.equal(inputs.ssm, st.ssm)
    inputs.load(ids, torch.tensor([2, 3]), st.ssm, st.conv, st.log_decay)
    assert inputs.lengths.tolist() == [2, 3]
    with pytest.raises(ValueError):
        inputs.load(torch.zeros(2, max(graphs.BUCKETS) + 1, dtype=torch.long), None, st.ssm, st.conv, st.log_decay)


@pytest.mark.parametrize("family", ["Mamba2", "Mamba1"])
def test_padded_forward_equals_plain_forward(family):
    """What a graph replays: its static inputs loaded (the ids right-padded to the bucket, each row's
    length masked) and passed as `_Graph` passes them. Its
    hidden states on the real positions and its states equal the unpadded forward's, from states
    holding different contexts, for a length inside each bucket and one filling it."""
    m = tiny_model(family)
    g = torch.Generator().manual_seed(3)
    states = [m.encode_context(torch.randint(0, TINY_VOCAB, (n,), generator=g)) for n in (5, 23, 9)]
    st = m._batched_state(type(states[0]).stack(states), 3)
    inputs = graphs._Inputs(m, 3, st.ssm, st.conv, st.log_decay)
    for t in (1, 7, 16, 40, 64):
        ids = torch.randint(0, TINY_VOCAB, (3, t), generator=g)
        plain = m._hidden_core(ids, st.ssm, st.conv, st.log_decay, None)
        inputs.load(ids, None, st.ssm, st.conv, st.log_decay)  # then the arguments a graph records
        got = m._hidden_core(inputs.ids[:, :graphs.bucket(t)], inputs.ssm, inputs.conv, inputs.log_decay,
                             inputs.lengths)
        torch.testing.assert_close(got[0][:, :t], plain[0], rtol=1e-5, atol=1e-5)
        for a, b in zip(got[1:], plain[1:]):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_graphs_apply_only_on_cuda_without_autograd():
    ids = torch.zeros(2, 8, dtype=torch.long)
    with torch.no_grad():
        assert not graphs.applies(None, ids)  # CPU: eager
    m = tiny_model("Mamba2")
    with torch.no_grad():
        m(ids)
    assert "_query_graphs" not in m.__dict__
