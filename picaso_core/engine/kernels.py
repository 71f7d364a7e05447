"""The optional GPU kernels: which are installed, which path a model runs, and the switch.

    op          kernel                                         package          build
    ssd         mamba_chunk_scan_combined (Mamba-2 prefill,    mamba-ssm        Triton: none
                initial state in, final state out)
    step        selective_state_update (the one-token update   mamba-ssm        Triton: none
                of `step`, Mamba-1 and Mamba-2)
    norm        rmsnorm_fn (Mamba-2's gated group RMSNorm)     mamba-ssm        Triton: none
    addnorm     rms_norm_fn (a block's residual add and its    mamba-ssm        Triton: none
                RMSNorm in one pass, as mamba_ssm's fused_add_norm)
    conv        causal_conv1d_fn (prefill conv, carried window) causal-conv1d   CUDA build
    conv_step   causal_conv1d_update (decode conv)             causal-conv1d    CUDA build
    dt_step     the decode step's softplus(dt + dt_bias), A    triton (torch's  none
                and log-decay accumulation in one launch       CUDA wheels)
                (engine/triton_step.py, Mamba-2)
    conv_roll   the decode conv in one launch where            triton           none
                causal-conv1d is absent (engine/triton_step.py)
    conv_dt     the decode conv and dt_step in one launch      triton           none
                (Mamba-2: preferred to both, and to conv_step)

Mamba-1's prefill scan (mamba_ssm's selective_scan_cuda) exists only as a CUDA build and is not
used: Mamba-1 prefill stays the pure-torch prefix scan.

The pure-torch path (engine/scan.py, engine/model.py) is the reference and runs wherever a kernel
does not: on CPU, without the package, while autograd records (fine-tuning: the reference's
gradients are the ones tests/engine/test_scan.py checks), or when switched off:

    PICASO_KERNELS=torch         environment, read at import (a comma list, e.g. "ssd,step", keeps
                                 those ops only; unset or "auto": every installed kernel)
    kernels.use_kernels(False)   in a program (True: all again; use_kernels(True, {"ssd"}): a subset)

A model says which path it runs in its repr (`SSMLanguageModel.kernel_path()`).

A Triton-only install (`MAMBA_SKIP_CUDA_BUILD=TRUE pip install mamba-ssm`) has no
selective_scan_cuda, and mamba_ssm's package __init__ imports it: `import mamba_ssm` fails although
every Triton kernel above is there. The loader then imports the kernel modules under a package
object whose __init__ is not run (`_load_triton_ops`).

A kernel that raises is reported (a warning naming it and the error) and not called again on
inputs of that kind (its dtypes and last dimensions: what a Triton kernel is compiled for), which run
the reference instead, so a broken install or an unsupported shape falls back instead of failing
every click; `broken` holds each op's last error and `calls` counts each kernel's successful calls
(the GPU tests assert that a kernel really ran).
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import sys
import types
from typing import Callable

import torch

log = logging.getLogger(__name__)

OPS = ("ssd", "step", "norm", "addnorm", "conv", "conv_step", "dt_step", "conv_roll", "conv_dt")
_SOURCES = {  # op -> (module, attribute)
    "ssd": ("mamba_ssm.ops.triton.ssd_combined", "mamba_chunk_scan_combined"),
    "step": ("mamba_ssm.ops.triton.selective_state_update", "selective_state_update"),
    "norm": ("mamba_ssm.ops.triton.layernorm_gated", "rmsnorm_fn"),
    "addnorm": ("mamba_ssm.ops.triton.layer_norm", "rms_norm_fn"),
    "conv": ("causal_conv1d", "causal_conv1d_fn"),
    "conv_step": ("causal_conv1d", "causal_conv1d_update"),
    "dt_step": ("picaso_core.engine.triton_step", "dt_step"),
    "conv_roll": ("picaso_core.engine.triton_step", "conv_roll"),
    "conv_dt": ("picaso_core.engine.triton_step", "conv_dt"),
}
PACKAGE = {"ssd": "mamba-ssm", "step": "mamba-ssm", "norm": "mamba-ssm", "addnorm": "mamba-ssm",
           "conv": "causal-conv1d", "conv_step": "causal-conv1d", "dt_step": "triton", "conv_roll": "triton",
           "conv_dt": "triton"}


def _parse(value: str) -> tuple[bool, frozenset[str]]:
    """PICASO_KERNELS -> (on, the ops allowed)."""
    v = value.strip().lower()
    if v in ("", "auto", "1", "on", "all"):
        return True, frozenset(OPS)
    if v in ("torch", "0", "off", "none"):
        return False, frozenset()
    ops = frozenset(o.strip() for o in v.split(",") if o.strip())
    unknown = ops - set(OPS)
    if unknown:
        raise ValueError(f"PICASO_KERNELS={value!r}: unknown ops {sorted(unknown)}; valid: auto, torch, or "
                         f"a comma list of {', '.join(OPS)}")
    return True, ops


ENABLED, ALLOWED = _parse(os.environ.get("PICASO_KERNELS", "auto"))
broken: dict[str, str] = {}
_failed: set[tuple] = set()  # (op, the failing inputs' kind)
calls: dict[str, int] = {op: 0 for op in OPS}
import_errors: dict[str, str] = {}


def _load_triton_ops() -> None:
    """Make `mamba_ssm.ops.triton.*` importable when the package's __init__ cannot run (a
    Triton-only install: it imports the CUDA-built selective_scan_cuda). The package object gets
    its __path__ from the installed folder and nothing else; submodules import as usual."""
    if "mamba_ssm" in sys.modules:
        return
    try:
        importlib.import_module("mamba_ssm")
        return
    except ImportError as e:  # selective_scan_cuda (or another CUDA op) missing
        import_errors["mamba_ssm"] = f"{type(e).__name__}: {e}"
    except Exception as e:  # e.g. a Triton or driver failure on a machine without CUDA
        import_errors["mamba_ssm"] = f"{type(e).__name__}: {e}"
        return
    spec = importlib.util.find_spec("mamba_ssm")
    if spec is None or not spec.submodule_search_locations:
        return
    pkg = types.ModuleType("mamba_ssm")
    pkg.__path__ = list(spec.submodule_search_locations)
    pkg.__file__ = spec.origin
    pkg.__spec__ = spec
    pkg.__package__ = "mamba_ssm"
    sys.modules["mamba_ssm"] = pkg


def _import_all() -> dict[str, Callable | None]:
    found: dict[str, Callable | None] = {}
    if importlib.util.find_spec("mamba_ssm") is not None:
        _load_triton_ops()
    for op, (module, attr) in _SOURCES.items():
        try:
            if importlib.util.find_spec(PACKAGE[op].replace("-", "_")) is None:  # the distribution's import name
                raise ImportError(f"{PACKAGE[op]} is not installed")
            if PACKAGE[op] == "triton" and not torch.cuda.is_available():  # CUDA-only: no Triton import on CPU
                raise ImportError("no CUDA device")
            found[op] = getattr(importlib.import_module(module), attr)
        except Exception as e:  # not installed, or a CUDA-less / broken install
            found[op] = None
            import_errors.setdefault(op, f"{type(e).__name__}: {e}")
    return found


_KERNELS = _import_all()


def installed() -> dict[str, bool]:
    """Which kernels imported (whether or not they are switched on)."""
    return {op: fn is not None for op, fn in _KERNELS.items()}


def use_kernels(on: bool, ops=None) -> None:
    """Switch the kernels on (where installed; `ops`: only those) or off (the pure-torch reference
    everywhere)."""
    global ENABLED, ALLOWED
    allowed = frozenset(OPS if ops is None else ops)
    unknown = allowed - set(OPS)
    if unknown:
        raise ValueError(f"unknown kernel ops {sorted(unknown)}; valid: {', '.join(OPS)}")
    ENABLED, ALLOWED = bool(on), allowed


def setting() -> tuple:
    """What a CUDA graph must be keyed by: the kernels it recorded."""
    return (ENABLED, ALLOWED)


def get(op: str, like: torch.Tensor) -> Callable | None:
    """The kernel for `op` if it should run on `like`'s device now, else None (use pure torch)."""
    fn = _KERNELS[op]
    if fn is None or not ENABLED or op not in ALLOWED or not like.is_cuda:
        return None
    if torch.is_grad_enabled() and like.requires_grad:  # training: the reference's gradients
        return None
    return fn


def run(op: str, fn: Callable, *args, **kwargs):
    """Call kernel `fn` of `op`; on an error, report it, remember the inputs' kind and return None
    (the caller then runs the reference, as it does from then on for inputs of that kind)."""
    kind = (op, *((a.dtype, a.shape[-1]) for a in args if isinstance(a, torch.Tensor)))
    if kind in _failed:
        return None
    try:
        out = fn(*args, **kwargs)
    except Exception as e:
        broken[op] = f"{type(e).__name__}: {e}"
        _failed.add(kind)
        log.warning("kernel %s (%s) failed, the pure-torch path runs for such inputs from now on: %s",
                    op, _SOURCES[op][1], broken[op])
        return None
    calls[op] += 1
    return out


def active(device: torch.device | str, family: str = "Mamba2") -> dict[str, bool]:
    """Which ops run a kernel for a model of `family` on `device` (inference)."""
    dev = torch.device(device)
    ops = OPS if family == "Mamba2" else ("step", "addnorm", "conv", "conv_step", "conv_roll")
    return {op: (dev.type == "cuda" and ENABLED and op in ALLOWED and _KERNELS[op] is not None) for op in ops}


def describe(device: torch.device | str, family: str = "Mamba2") -> str:
    """One line naming the path a model of `family` runs on `device`, e.g.
    'kernels: ssd, step, norm, addnorm; pure torch: conv, conv_step (causal-conv1d not installed)'."""
    dev = torch.device(device)
    if dev.type != "cuda":
        return f"pure torch ({dev.type}: the kernels are CUDA-only)"
    if not ENABLED:
        return "pure torch (kernels switched off: PICASO_KERNELS=torch)"
    on = active(dev, family)
    fast = [op for op, v in on.items() if v]
    slow = [op for op, v in on.items() if not v]
    why = list(dict.fromkeys(f"{PACKAGE[op]} not installed" if _KERNELS[op] is None else "PICASO_KERNELS leaves it out"
                             for op in slow))
    parts = []
    if fast:
        parts.append("kernels: " + ", ".join(fast))
    if slow:
        parts.append("pure torch: " + ", ".join(slow) + " (" + "; ".join(why) + ")")
    if family != "Mamba2":
        parts.append("Mamba-1 prefill scan: pure torch")
    failed = [f"{op} ({broken[op][:120]})" for op in fast if op in broken]
    if failed:
        parts.append("failed on some inputs, pure torch there: " + ", ".join(failed))
    return "; ".join(parts)
