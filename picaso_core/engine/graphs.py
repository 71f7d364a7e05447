"""CUDA graphs for the short forwards of the query path.

On a GPU, a forward of a few dozen tokens is launch-bound: each layer is ~20-40 small kernels
(the projections, the conv, the scan's pieces, the norms): the 130m shape's forward of 8 x 64
tokens launched 2,227 kernels for 8 ms of GPU work and took 49 ms on an H100 (docs/gpu.md). The query path (Compose & compare's prefill of the query from every composed state, the
scoring of the continuation, the attribution ablations) is made of such forwards.

Here a forward of t <= max(BUCKETS) tokens for b <= MAX_ROWS rows is captured once per
(model, b, bucket, dtypes, kernel setting) as one CUDA graph, then replayed: the ids are right-padded to the
bucket and the padding masked exactly as `encode_contexts` masks a shorter row of a batch (dt = 0:
decay 1, nothing written; the conv window gathered at each row's own length), so a replay gives
the eager forward's hidden states for the t real positions and its states.

    static inputs   per (model, b, dtypes): ids [b, max bucket], lengths [b], the batched state
                    (copied in before each replay)
    graph           per bucket: _hidden_core on those inputs; its outputs are copied out (cloned)
                    after the replay, since the next replay overwrites them
    bounds          at most MAX_GRAPHS graphs per model, least recently used dropped first; one
                    replay at a time per model (a lock: handlers may run in threads)

Used only on CUDA, without autograd (training runs eagerly), and when ENABLED
(environment PICASO_CUDA_GRAPHS=0 turns this and the decode graphs off). Longer forwards
(encoding contexts, Concat's read of every context) run eagerly, as each captured length would hold
its own activations; they are launch-bound too (Concat's read of 9 contexts at the 2.7b shape: about
108 ms on an H100), which larger buckets could still take.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict

import torch
from torch import Tensor

from picaso_core.engine import kernels

ENABLED = os.environ.get("PICASO_CUDA_GRAPHS", "1") != "0"
BUCKETS = (16, 32, 64, 128)  # padded lengths; a forward of t tokens replays the smallest bucket >= t
MAX_ROWS = 16  # rows per captured forward (continuation_losses' batch)
MAX_GRAPHS = 8  # per model; each holds its own memory pool (activations and output state)


def bucket(t: int, buckets: tuple[int, ...] = BUCKETS) -> int | None:
    """The padded length a t-token forward replays (None: longer than every bucket, runs eagerly)."""
    if t < 1:
        raise ValueError(f"a forward needs at least one token, got {t}")
    return next((bk for bk in sorted(buckets) if bk >= t), None)


class _Inputs:
    """The static input buffers shared by one model's graphs of b rows and given state dtypes."""

    def __init__(self, model, b: int, ssm: Tensor, conv: Tensor, log_decay: Tensor):
        dev = model.device
        self.ids = torch.zeros(b, max(BUCKETS), dtype=torch.long, device=dev)
        self.lengths = torch.ones(b, dtype=torch.long, device=dev)
        self.ssm = torch.zeros(b, *ssm.shape[1:], dtype=ssm.dtype, device=dev)
        self.conv = torch.zeros(b, *conv.shape[1:], dtype=conv.dtype, device=dev)
        self.log_decay = torch.zeros(b, *log_decay.shape[1:], dtype=log_decay.dtype, device=dev)

    def load(self, ids: Tensor, lengths: Tensor | None, ssm: Tensor, conv: Tensor, log_decay: Tensor) -> None:
        """Copy a forward's inputs in: ids [b, t] right-padded with token 0, each row's valid length
        (t for every row when `lengths` is None), the batched state."""
        t = ids.shape[1]
        if t > self.ids.shape[1]:
            raise ValueError(f"cannot pad {t} tokens into a bucket of {self.ids.shape[1]}")
        self.ids[:, :t].copy_(ids)
        self.ids[:, t:].zero_()
        if lengths is None:
            self.lengths.fill_(t)
        else:
            self.lengths.copy_(lengths)
        self.ssm.copy_(ssm)  # a single state expanded to b rows broadcasts here
        self.conv.copy_(conv)
        self.log_decay.copy_(log_decay)


def capture(device, fn, *args, warmup_args: tuple | None = None):
    """Record `fn(*args)` as one CUDA graph; returns (graph, its outputs: static tensors each replay
    overwrites). fn runs twice first on a side stream (on `warmup_args` where given, e.g. scratch copies
    of buffers fn updates in place), so that cuBLAS handles and Triton autotuning happen off the capture.
    thread_local: other threads' GPU work goes on during the capture (the app serves several handlers)."""
    side = torch.cuda.Stream(device=device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(2):
            fn(*(args if warmup_args is None else warmup_args))
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):  # records, runs nothing
        out = fn(*args)
    return graph, out


class _Graph:
    """`model._hidden_core` on a bucket of T positions over `inputs`, captured as one CUDA graph."""

    def __init__(self, model, inputs: _Inputs, T: int):
        args = (inputs.ids[:, :T], inputs.ssm, inputs.conv, inputs.log_decay, inputs.lengths)
        self.graph, self.out = capture(model.device, model._hidden_core, *args)

    def replay(self, t: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        self.graph.replay()
        hidden, ssm, conv, log_decay = self.out
        return hidden[:, :t].clone(), ssm.clone(), conv.clone(), log_decay.clone()


class _Cache:
    """One model's graphs (least recently used first) and their input buffers, under one lock."""

    def __init__(self):
        self.lock = threading.Lock()
        self.graphs: OrderedDict[tuple, _Graph] = OrderedDict()
        self.inputs: dict[tuple, _Inputs] = {}
        self.captures = 0
        self.replays = 0


def cache_of(model) -> _Cache:
    return model.__dict__.setdefault("_query_graphs", _Cache())


def applies(model, ids: Tensor) -> bool:
    """Whether `forward` replays a graph for these ids (else the caller runs eagerly)."""
    return (ENABLED and ids.is_cuda and not torch.is_grad_enabled() and ids.shape[0] <= MAX_ROWS
            and ids.shape[1] <= max(BUCKETS) and not torch.cuda.is_current_stream_capturing())


def forward(model, ids: Tensor, st, lengths: Tensor | None):
    """`model._hidden_core(ids, st.ssm, st.conv, st.log_decay, lengths)` by a graph replay, or None
    where no graph applies (`applies`). `st` is a batched ContextState of ids' rows."""
    if not applies(model, ids):
        return None
    b, t = ids.shape
    T = bucket(t)
    w = model.embedding.weight
    dtypes = (st.ssm.dtype, st.conv.dtype, st.log_decay.dtype)
    # moved or cast weights, or the kernels switched: new captures (a graph replays what it recorded)
    in_key = (b, dtypes, w.data_ptr(), w.dtype, kernels.setting())
    key = (*in_key, T)
    cache = cache_of(model)
    with cache.lock:
        inputs = cache.inputs.get(in_key)
        if inputs is None:
            inputs = cache.inputs[in_key] = _Inputs(model, b, st.ssm, st.conv, st.log_decay)
        inputs.load(ids, lengths, st.ssm, st.conv, st.log_decay)
        graph = cache.graphs.get(key)
        if graph is None:
            graph = cache.graphs[key] = _Graph(model, inputs, T)
            cache.captures += 1
            while len(cache.graphs) > MAX_GRAPHS:
                old, _ = cache.graphs.popitem(last=False)
                if not any(k[:-1] == old[:-1] for k in cache.graphs):
                    cache.inputs.pop(old[:-1], None)
        cache.graphs.move_to_end(key)
        cache.replays += 1
        return graph.replay(t)
