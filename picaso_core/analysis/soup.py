"""State Soup (Pióro et al. 2024): a library of in-context skills kept as states, maps of it per
layer, task retrieval by state similarity, and mixing of states.

Glossary (paper -> code):
    skill / task τ        a skill task of picaso_core.data.skills ("antonym", ...; its label-shuffled
                          twin "<task>_shuffled" keeps the answers' distribution, drops the relation)
    k-shot demonstration  k lines "question → answer\\n" (skills.format_demos)
    library state         the state of one `shots`-shot demonstration of a task's TRAIN items
    q_τ^k                 the state of a k-shot demonstration of τ's TEST items (sec. 2.1)
    features              one layer of a state flattened: ssm [H*P*N] (Mamba-2) or conv [C*(K-1)]
    mixing                soup (mean) of states (sec. 2.2); weighted: w x_a + (1-w) x_b; A-decay
                          (sec. 2.3): x_2 + A_2 x_1 (compose.decay_mix)

Sections of the paper and the functions here:
    sec. 2.1, fig. 1, 4, 5   SkillLibrary, features, project, cluster_quality, retrieval_accuracy
    sec. 2.2, fig. 2         mixing_table (left), retrieval_mixing (right), two_task_mix
    sec. 2.3, fig. 3         decay_comparison, decay_table

Accuracy is greedy exact match read off one teacher-forced forward: every answer token and the
newline closing the line must be the model's argmax (what greedy decoding would write, scored for
many states in one batched forward instead of one generation each). Loss is the mean NLL per
answer token, as model.continuation_loss. Everything returns plain data (lists, dicts, numpy).
"""

from __future__ import annotations

import functools
import hashlib
import random
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from picaso_core.compose import compose, decay_mix
from picaso_core.data.skills import SHUFFLED_SUFFIX, format_demos, format_query, load_skill_tasks
from picaso_core.engine.state import ContextState

PARTS = ("ssm", "conv")
PROJECTIONS = ("pca", "tsne", "umap")
_UMAP_LOCK = threading.Lock()  # see project()
_UMAP_CACHED = False  # see _cache_umap_numba()
PCA_DIMS = 50  # PCA to this many dimensions before t-SNE / UMAP, as the Embedding Projector does
DECAY_METHODS = ("concat", "a_decay", "mean", "c2_only")  # sec. 2.3, in the paper's order, best first
Progress = Callable[[int, int], None]


def _noop(done: int, total: int) -> None:
    return None


@functools.lru_cache(maxsize=8)
def skill_tasks(split: str, include_shuffled: bool = True) -> dict:
    """load_skill_tasks, computed once per process (it shuffles labels until no pair keeps its
    answer: ~1 s a call). Treat the result as read-only."""
    return load_skill_tasks(split, include_shuffled=include_shuffled)


def base_task(task: str) -> str:
    return task[: -len(SHUFFLED_SUFFIX)] if task.endswith(SHUFFLED_SUFFIX) else task


def task_names(tasks: Sequence[str] | None = None, include_shuffled: bool = True) -> list[str]:
    """The tasks a library holds: every given task (None: all skill tasks) and, for a base task,
    its `<task>_shuffled` twin. Raises ValueError naming the valid tasks for an unknown one."""
    known = skill_tasks("all", True)
    if tasks is None:
        tasks = [t for t in known if not t.endswith(SHUFFLED_SUFFIX)]
    if isinstance(tasks, str) or not len(tasks):
        raise ValueError("tasks must be a non-empty list of task names (None: every skill task)")
    out: list[str] = []
    for t in tasks:
        if t not in known:
            valid = ", ".join(x for x in known if not x.endswith(SHUFFLED_SUFFIX))
            raise ValueError(f"unknown task {t!r}; valid tasks: {valid} (each also as <task>{SHUFFLED_SUFFIX})")
        for v in (t, t + SHUFFLED_SUFFIX) if include_shuffled and not t.endswith(SHUFFLED_SUFFIX) else (t,):
            if v not in out:
                out.append(v)
    return out


def demonstration_sets(pairs: Sequence, shots: int, count: int, rng: random.Random) -> list[list]:
    """`count` draws of `shots` items, disjoint while the items last (paper A.1: no sample appears
    in two demonstrations), then from a fresh shuffle."""
    if shots < 1 or shots > len(pairs):
        raise ValueError(f"shots = {shots}: need 1 <= shots <= {len(pairs)} (the task's items)")
    pool: list = []
    out = []
    for _ in range(count):
        if len(pool) < shots:
            pool = list(pairs)
            rng.shuffle(pool)
        out.append(pool[:shots])
        pool = pool[shots:]
    return out


def _draw(items: Sequence, k: int, rng: random.Random) -> list:
    """k items without repeats while k <= len(items), topped up with repeats beyond (a task's test
    split can hold fewer than 16 items; repeats keep k-shot queries possible up to any k)."""
    drawn = rng.sample(list(items), min(k, len(items)))
    return drawn + rng.choices(list(items), k=max(0, k - len(items)))


# --------------------------------------------------------------------------------------------
# The library
# --------------------------------------------------------------------------------------------
@dataclass
class SkillLibrary:
    """`per_task` states of `shots`-shot demonstrations for every task (paper sec. 2, A.1).

    states[i] is the state of texts[i], a demonstration of tasks[i]. Build with `build`.
    """

    states: list[ContextState]
    tasks: list[str]
    texts: list[str]
    shots: int
    per_task: int
    seed: int
    store: object = None  # the StateStore holding the states, if any
    _unit: dict = field(default_factory=dict, repr=False)  # (layer, part) -> unit-norm features [n, D]

    @staticmethod
    def contexts(tasks: Sequence[str] | None = None, shots: int = 16, per_task: int = 12,
                 seed: int = 0) -> list[tuple[str, str, str]]:
        """(id, task, text) of every library state, in library order; a pure function of its args."""
        train = skill_tasks("train", True)
        if per_task < 1:
            raise ValueError(f"per_task must be >= 1, got {per_task}")
        out = []
        for task in task_names(tasks):
            rng = random.Random(f"soup-library:{seed}:{task}")
            for i, demo in enumerate(demonstration_sets(train[task], shots, per_task, rng)):
                out.append((f"{task}/{i:03d}", task, format_demos(demo)))
        return out

    @classmethod
    def default_folder(cls, cache_dir: str | Path, model, tasks=None, shots: int = 16, per_task: int = 12,
                       seed: int = 0) -> Path:
        """<cache_dir>/skills-<hash of the texts>-<model fingerprint>: a change of the skill data
        or of the parameters gets a new folder, never a stale state."""
        h = hashlib.sha256(repr(cls.contexts(tasks, shots, per_task, seed)).encode()).hexdigest()[:10]
        return Path(cache_dir) / f"skills-s{shots}-n{per_task}-seed{seed}-{h}-{model.fingerprint()}"

    @classmethod
    def build(cls, model, tasks: Sequence[str] | None = None, shots: int = 16, per_task: int = 12, seed: int = 0,
              store=None, progress: Progress | None = None, batch_size: int = 32) -> "SkillLibrary":
        """Encode the library (or reopen it from `store`).

        Args:
            tasks: base or shuffled task names; a base task brings its shuffled twin. None: all.
            shots, per_task, seed: `per_task` demonstrations of `shots` train items per task,
                drawn by a generator seeded with (seed, task): the same library on every run.
            store: None (states kept in memory only), a folder (a StateStore there is opened, or
                built, and only the states it lacks are encoded: encoded once, reopened at the next
                start), or an open StateStore of `model`.
            progress: progress(done, total) while encoding.
        """
        items = cls.contexts(tasks, shots, per_task, seed)
        progress = progress or _noop
        if store is None:
            tok = model.tokenizer
            states = model.encode_contexts([tok.encode(text) for _, _, text in items], batch_size=batch_size,
                                           progress=progress)
        else:
            from picaso_core.store.store import StateStore

            if isinstance(store, (str, Path)):
                folder = Path(store)
                store = (StateStore.open(folder, model) if (folder / "store.json").exists()
                         else StateStore.build(model, [], folder, suffix="", progress=False))
            if store.suffix != "":
                raise ValueError(f"the skill library's store {store.folder} has suffix {store.suffix!r}; "
                                 "demonstrations are stored as they are: use an empty folder")
            store.ensure([(cid, text) for cid, _, text in items], batch_size=batch_size, progress=progress)
            states = store.get_many([cid for cid, _, _ in items])
        return cls(list(states), [t for _, t, _ in items], [x for _, _, x in items], shots, per_task, seed, store)

    # ---- views -----------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.states)

    @property
    def task_list(self) -> list[str]:
        """The distinct tasks, in library order."""
        return list(dict.fromkeys(self.tasks))

    @property
    def n_layer(self) -> int:
        return int(self.states[0].ssm.shape[0])

    def unit_features(self, layer: int, part: str = "ssm") -> np.ndarray:
        """features(...) scaled to unit norm (cached): cosine similarity is a dot product."""
        key = (int(layer), part)
        if key not in self._unit:
            self._unit[key] = _unit(features(self.states, layer, part))
        return self._unit[key]

    def nearest(self, state: ContextState, layer: int, part: str = "ssm", top: int = 5) -> list[tuple[int, float]]:
        """(library index, cosine similarity) of the `top` most similar states, best first."""
        if top < 1:
            raise ValueError(f"top must be >= 1, got {top}")
        q = _unit(features([state], layer, part))[0]
        sim = self.unit_features(layer, part) @ q
        idx = np.argsort(-sim, kind="stable")[:top]
        return [(int(i), float(sim[i])) for i in idx]

    def retrieve(self, state: ContextState, layer: int, part: str = "ssm", top: int = 5) -> list[tuple[str, float]]:
        """The tasks of the `top` library states most similar to `state` at `layer` (cosine), best
        first (sec. 2.1: the paper uses the SSM state of a middle layer)."""
        return [(self.tasks[i], s) for i, s in self.nearest(state, layer, part, top)]


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


# --------------------------------------------------------------------------------------------
# Features and projections (fig. 1 left, fig. 4-5)
# --------------------------------------------------------------------------------------------
def features(states: Sequence[ContextState], layer: int, part: str = "ssm") -> np.ndarray:
    """One layer of each state, flattened: [n, D], D = H*P*N (Mamba-2 ssm), D*N (Mamba-1 ssm) or
    C*(K-1) (conv window). float32."""
    if part not in PARTS:
        raise ValueError(f"part must be one of {PARTS}, got {part!r}")
    if not states:
        raise ValueError("no states to take features of")
    n_layer = states[0].ssm.shape[0]
    if not isinstance(layer, (int, np.integer)) or not 0 <= layer < n_layer:
        raise ValueError(f"layer {layer!r} is out of range: this model has layers 0..{n_layer - 1}")
    return torch.stack([getattr(s, part)[layer].reshape(-1) for s in states]).float().numpy()


def pca(x: np.ndarray, dim: int) -> np.ndarray:
    """Centred PCA scores [n, dim] through the n x n Gram matrix (n states << D features: an
    eigendecomposition of n x n instead of an SVD of n x D). Each axis's sign is fixed so that its
    largest-magnitude score is positive: the same map on every run."""
    x = torch.from_numpy(np.asarray(x, dtype=np.float32))
    x = x - x.mean(0)
    # The n x n Gram matrix in float32 (the costly product: n^2 D), its eigendecomposition in float64.
    gram = (x @ x.T).double()  # [n, n]
    vals, vecs = torch.linalg.eigh(gram)  # ascending
    dim = min(dim, x.shape[0])
    vals, vecs = vals.flip(0)[:dim], vecs.flip(1)[:, :dim]
    scores = vecs * vals.clamp(min=0).sqrt()  # U S: the projections on the principal axes
    sign = torch.sign(scores.gather(0, scores.abs().argmax(0, keepdim=True)))
    scores = scores * torch.where(sign == 0, torch.ones_like(sign), sign)
    out = scores.numpy()
    if out.shape[1] < dim:
        out = np.pad(out, ((0, 0), (0, dim - out.shape[1])))
    return out


def project(x: np.ndarray, method: str = "pca", dim: int = 2, seed: int = 0) -> np.ndarray:
    """Project features [n, D] to [n, dim]; deterministic per seed.

    pca: exact PCA. tsne (scikit-learn) and umap (umap-learn, cosine metric): after PCA to
    PCA_DIMS dimensions, as the Embedding Projector does (fast, and the noise dimensions go).
    """
    if method not in PROJECTIONS:
        raise ValueError(f"method must be one of {PROJECTIONS}, got {method!r}")
    if dim not in (2, 3):
        raise ValueError(f"dim must be 2 or 3, got {dim!r}")
    x = np.asarray(x, dtype=np.float32)
    n = x.shape[0]
    if n < 4:
        raise ValueError(f"need at least 4 states to project, got {n}")
    if method == "pca":
        return pca(x, dim).astype(np.float32)
    z = pca(x, min(PCA_DIMS, n - 1)).astype(np.float32)
    if method == "tsne":
        from sklearn.manifold import TSNE

        # 500 iterations (scikit-learn's default is 1000): the clusters are settled by then, and ~500
        # states take ~4 s instead of ~9 s on a shared 2-core machine.
        return TSNE(n_components=dim, perplexity=float(min(30.0, (n - 1) / 3)), init="pca", random_state=seed,
                    max_iter=500).fit_transform(z).astype(np.float32)
    import umap  # numba compiles on first use: the app warms it in a background thread

    # One UMAP fit at a time: a fit that starts while another thread's first fit is still compiling
    # numba code (the app's warm-up) raised IndexError in fresh containers (issue #20). A user's first
    # UMAP map therefore waits for the warm-up instead of racing it; warm fits take ~1.6 s.
    with _UMAP_LOCK:
        _cache_umap_numba()
        return umap.UMAP(n_components=dim, n_neighbors=min(15, n - 1), metric="cosine", random_state=seed,
                         n_jobs=1).fit_transform(z).astype(np.float32)


def _cache_umap_numba() -> None:
    """Keep UMAP's compiled numba code on disk (numba's cache: __pycache__ beside umap-learn, or the
    user's cache folder where that is read-only). umap-learn compiles its functions without
    cache=True, so every new process paid the compile again: 11-16 s of a first fit of 240 states on
    2 shared cores, 0.3 s once loaded from disk (bench/umap_first_map.py). Run before the first fit
    compiles them (under _UMAP_LOCK)."""
    global _UMAP_CACHED
    if _UMAP_CACHED:
        return
    try:
        from numba.core.caching import NullCache
        from numba.core.registry import CPUDispatcher
        from umap import distances, layouts, spectral, umap_, utils
    except ImportError:  # a stand-in umap (tests) or another numba: fits still work, uncached
        return
    _UMAP_CACHED = True
    for module in (umap_, layouts, utils, distances, spectral):
        for f in vars(module).values():
            if isinstance(f, CPUDispatcher) and isinstance(f._cache, NullCache):
                f.enable_caching()


def warm_up_umap() -> None:
    """Compile UMAP's numba code once (tens of seconds on a cold machine; cached on disk after)."""
    x = np.random.default_rng(0).normal(size=(40, 8)).astype(np.float32)
    project(x, "umap", 2)


def cluster_quality(lib: SkillLibrary, layers: Sequence[int] | None = None,
                    parts: Sequence[str] = PARTS) -> dict:
    """Per layer and part, how well the full (unprojected) states separate by task:
    1-NN task accuracy (leave-one-out, cosine) and the silhouette (cosine distance).
    Returns {"layers": [...], "chance": 1/#tasks, part: {"nn_accuracy": [...], "silhouette": [...]}}."""
    from sklearn.metrics import silhouette_score

    layers = list(range(lib.n_layer)) if layers is None else list(layers)
    labels = np.array(lib.tasks)
    out: dict = {"layers": layers, "chance": 1.0 / len(lib.task_list)}
    for part in parts:
        acc, sil = [], []
        for layer in layers:
            u = lib.unit_features(layer, part)
            sim = u @ u.T
            np.fill_diagonal(sim, -np.inf)
            acc.append(float((labels[sim.argmax(1)] == labels).mean()))
            dist = np.clip(1 - u @ u.T, 0, 2)
            np.fill_diagonal(dist, 0)
            sil.append(float(silhouette_score(dist, labels, metric="precomputed")))
        out[part] = {"nn_accuracy": acc, "silhouette": sil}
    return out


# --------------------------------------------------------------------------------------------
# Scoring answers from states
# --------------------------------------------------------------------------------------------
@torch.no_grad()
def score_answer(model, states: Sequence[ContextState], prompt: str, answer: str) -> tuple[list[float], list[bool]]:
    """Loss of ` answer` after `prompt` from each state, and greedy exact match (every answer token
    and the closing newline is the argmax), in one batched forward.

    Returns (losses, exact), one per state."""
    tok = model.tokenizer
    p, a, nl = tok.encode(prompt), tok.encode(answer), tok.encode("\n")
    if not p or not a:
        raise ValueError("prompt and answer must each have at least one token")
    target = torch.tensor(a + nl)
    ids = torch.tensor(p + a + nl)[None].expand(len(states), -1)
    hidden, _ = model.hidden_states(ids, ContextState.stack([s.to(model.device) for s in states]))
    logits = model.lm_head(hidden[:, len(p) - 1: -1]).float()[..., : model.config.vocab_size]  # [b, |a|+|nl|, V]
    tgt = target.to(logits.device)[None].expand(len(states), -1)
    nll = F.cross_entropy(logits.transpose(1, 2), tgt, reduction="none")[:, : len(a)].mean(1)
    exact = (logits.argmax(-1) == tgt).all(1)
    return nll.tolist(), exact.tolist()


def _encode(model, texts: Sequence[str]) -> list[ContextState]:
    tok = model.tokenizer
    return model.encode_contexts([tok.encode(t) for t in texts])


def _check_ks(ks: Sequence[int]) -> list[int]:
    ks = [int(k) for k in ks]
    if not ks or min(ks) < 1:
        raise ValueError(f"every k must be >= 1 (a k-shot demonstration has k lines), got {ks}")
    return ks


# --------------------------------------------------------------------------------------------
# Task retrieval (sec. 2.1, fig. 1 right)
# --------------------------------------------------------------------------------------------
def query_demonstrations(lib: SkillLibrary, ks: Sequence[int], queries: int, seed: int = 0) -> list[tuple[str, int, str]]:
    """(task, k, text) of `queries` k-shot demonstrations of each library task's TEST items (never
    in the library) for each k."""
    test = skill_tasks("test", True)
    out = []
    for task in lib.task_list:
        for k in _check_ks(ks):
            rng = random.Random(f"soup-query:{seed}:{task}:{k}")
            out += [(task, k, format_demos(_draw(test[task], k, rng))) for _ in range(queries)]
    return out


def retrieval_accuracy(model, lib: SkillLibrary, ks: Sequence[int] = (1, 2, 4, 8, 16), queries: int = 10,
                       part: str = "ssm", layers: Sequence[int] | None = None, seed: int = 0,
                       progress: Progress | None = None) -> dict:
    """Top-1 task retrieval accuracy vs k per layer: is the library state nearest (cosine) to the
    state of a k-shot demonstration of τ's test items a τ-state?

    Returns {"ks", "layers", "part", "queries", "accuracy": [layer][k], "chance"}."""
    ks = _check_ks(ks)
    layers = list(range(lib.n_layer)) if layers is None else list(layers)
    demos = query_demonstrations(lib, ks, queries, seed)
    tok = model.tokenizer
    states = model.encode_contexts([tok.encode(t) for _, _, t in demos], progress=progress)
    truth = np.array([t for t, _, _ in demos])
    kk = np.array([k for _, k, _ in demos])
    labels = np.array(lib.tasks)
    acc = []
    for layer in layers:
        sim = _unit(features(states, layer, part)) @ lib.unit_features(layer, part).T  # [queries, library]
        hit = labels[sim.argmax(1)] == truth
        acc.append([float(hit[kk == k].mean()) for k in ks])
    return {"ks": ks, "layers": layers, "part": part, "queries": queries, "accuracy": acc,
            "chance": 1.0 / len(lib.task_list)}


# --------------------------------------------------------------------------------------------
# Mixing (sec. 2.2, fig. 2)
# --------------------------------------------------------------------------------------------
def mixing_table(model, tasks: Sequence[str] | None = None, total: int = 16, ks: Sequence[int] = (1, 2, 4, 8, 16),
                 queries: int = 10, seed: int = 0, progress: Progress | None = None) -> list[dict]:
    """Fig. 2 left: for each k, the soup of m = total/k states of k-shot demonstrations vs k shots
    alone vs one state of all m*k = total shots, on test queries of each base task.

    The k-shot set is the soup's first part and the total-shot state reads the same items, so
    the three differ only in how the demonstrations reach the state.
    Returns rows {"k", "m", "method" ("k_shots" | "soup" | "all_shots"), "accuracy", "loss", "n"}."""
    ks = _check_ks(ks)
    if any(total % k for k in ks):
        raise ValueError(f"every k must divide total = {total}, got {ks}")
    names = [t for t in task_names(tasks, include_shuffled=False) if not t.endswith(SHUFFLED_SUFFIX)]
    train, test = skill_tasks("train", False), skill_tasks("test", False)
    progress = progress or _noop
    acc: dict = {}
    jobs = [(t, i) for t in names for i in range(queries)]
    for j, (task, i) in enumerate(jobs):
        rng = random.Random(f"soup-mix:{seed}:{task}:{i}")
        q, a = rng.choice(test[task])
        demo = rng.sample(train[task], total)
        parts = {k: [demo[s: s + k] for s in range(0, total, k)] for k in ks}
        texts = [format_demos(demo)] + [format_demos(p) for k in ks for p in parts[k]]
        enc = _encode(model, texts)
        full, rest = enc[0], enc[1:]
        cand, keys = [full], [(None, "all_shots")]
        for k in ks:
            sts, rest = rest[: len(parts[k])], rest[len(parts[k]):]
            cand += [sts[0], compose("soup", sts)]
            keys += [(k, "k_shots"), (k, "soup")]
        losses, exact = score_answer(model, cand, format_query(q), f" {a}")
        for key, loss, ok in zip(keys, losses, exact):
            acc.setdefault(key, []).append((loss, ok))
        progress(j + 1, len(jobs))
    rows = []
    for k in ks:
        for method in ("k_shots", "soup", "all_shots"):
            vals = acc[(k, method) if method != "all_shots" else (None, method)]
            rows.append({"k": k, "m": total // k, "method": method, "accuracy": float(np.mean([v[1] for v in vals])),
                         "loss": float(np.mean([v[0] for v in vals])), "n": len(vals)})
    return rows


def retrieval_mixing(model, lib: SkillLibrary, ks: Sequence[int] = (1, 2, 4, 8), top: int = 1, layer: int | None = None,
                     part: str = "ssm", queries: int = 10, seed: int = 0, progress: Progress | None = None) -> list[dict]:
    """Fig. 2 right: the state of a k-shot demonstration (test items) alone vs mixed (soup) with
    the `top` library states nearest to it, scored on another test query of the same task.

    Returns rows {"k", "method" ("query" | "retrieved_mix"), "accuracy", "loss", "retrieval_hit", "n"}."""
    ks = _check_ks(ks)
    layer = lib.n_layer // 2 if layer is None else layer
    names = [t for t in lib.task_list if not t.endswith(SHUFFLED_SUFFIX)]
    test = skill_tasks("test", False)
    progress = progress or _noop
    res: dict = {}
    jobs = [(t, k, i) for t in names for k in ks for i in range(queries)]
    for j, (task, k, i) in enumerate(jobs):
        rng = random.Random(f"soup-rmix:{seed}:{task}:{k}:{i}")
        q, a = rng.choice(test[task])
        demo = _draw([p for p in test[task] if p[0] != q], k, rng)
        qstate = _encode(model, [format_demos(demo)])[0]
        near = lib.nearest(qstate, layer, part, top)
        mixed = compose("soup", [lib.states[n] for n, _ in near] + [qstate])
        losses, exact = score_answer(model, [qstate, mixed], format_query(q), f" {a}")
        hit = lib.tasks[near[0][0]] == task
        for method, loss, ok in zip(("query", "retrieved_mix"), losses, exact):
            res.setdefault((k, method), []).append((loss, ok, hit))
        progress(j + 1, len(jobs))
    return [{"k": k, "method": m, "accuracy": float(np.mean([v[1] for v in vals])),
             "loss": float(np.mean([v[0] for v in vals])), "retrieval_hit": float(np.mean([v[2] for v in vals])),
             "n": len(vals)} for (k, m), vals in res.items()]


def task_state(lib: SkillLibrary, task: str) -> ContextState:
    """A task's skill: the soup of its library states."""
    idx = [i for i, t in enumerate(lib.tasks) if t == task]
    if not idx:
        raise ValueError(f"task {task!r} is not in the library; it holds: {', '.join(lib.task_list)}")
    return compose("soup", [lib.states[i] for i in idx])


@torch.no_grad()
def two_task_mix(model, state_a: ContextState, state_b: ContextState, prompt: str, answers: Sequence[str],
                 ws: Sequence[float] = tuple(np.round(np.linspace(0, 1, 11), 2)), max_new_tokens: int = 8) -> list[dict]:
    """Weighted mixing of two tasks' states, x = w x_a + (1-w) x_b (sec. 2.2's counting +
    English-French example), as w moves: the greedy generation after `prompt` and the loss of each
    answer in `answers`.

    Returns rows {"w", "generation", "losses": {answer: loss}}."""
    if not prompt.strip():
        raise ValueError("the prompt is empty: type a query line such as 'bat →'")
    answers = [a if a.startswith(" ") else " " + a for a in answers if a.strip()]
    tok = model.tokenizer
    mixes = [compose("weighted", [state_a, state_b], weights=[float(w), 1.0 - float(w)]) for w in ws]
    gens = model.generate_batch(tok.encode(prompt), mixes, max_new_tokens=max_new_tokens)  # all w at once
    losses = {a.strip(): score_answer(model, mixes, prompt, a)[0] for a in answers}  # one forward per answer
    return [{"w": float(w), "generation": tok.display_text(gen).split("\n")[0].strip(),
             "losses": {a: v[i] for a, v in losses.items()}} for i, (w, gen) in enumerate(zip(ws, gens))]


# --------------------------------------------------------------------------------------------
# Mixing sequential chunks (sec. 2.3, fig. 3)
# --------------------------------------------------------------------------------------------
@dataclass
class DecayComparison:
    losses: dict[str, float]  # DECAY_METHODS -> loss on the test chunk
    order: list[str]  # the methods sorted by loss, best first


@torch.no_grad()
def decay_comparison(model, c1: Sequence[int], c2: Sequence[int], test: Sequence[int]) -> DecayComparison:
    """Loss on chunk `test` after c1 ⧺ c2 from four states (token ids in):
        concat    c1 then c2 processed in sequence (the reference)
        a_decay   decay_mix(x(c1), x(c2)) = x(c2) + A(c2) x(c1); exact for one layer. Its conv window
                  is c2's last inputs (conv="last"), as after reading c1 ⧺ c2.
        mean      the soup of x(c1) and x(c2) (mean-mixing)
        c2_only   x(c2)
    The test chunk's first token is predicted from the state as well (query = its first token is
    not possible without a prompt, so the loss is over test[1:] given test[0])."""
    if len(c1) == 0 or len(c2) == 0 or len(test) < 2:
        raise ValueError("c1 and c2 need at least one token each and the test chunk at least two")
    s1, s2 = model.encode_contexts([list(c1), list(c2)])
    states = {
        "concat": model.encode_context(list(c2), state=s1),
        "a_decay": decay_mix(s1, s2, conv="last"),
        "mean": compose("soup", [s1, s2]),
        "c2_only": s2,
    }
    vals = model.continuation_losses(list(test[:1]), list(test[1:]), list(states.values()))
    losses = dict(zip(states, vals))
    return DecayComparison(losses, sorted(losses, key=losses.get))


def document_chunks(texts: Sequence[str], tokenizer, chunk_tokens: int = 100, documents: int = 20,
                    sep: str = "\n\n") -> list[tuple[list[int], list[int], list[int]]]:
    """(c1, c2, test) chunks of `chunk_tokens` tokens each, cut from consecutive windows of the
    texts joined by `sep` (the paper: 3 x 100 tokens of one news article)."""
    if chunk_tokens < 2:
        raise ValueError(f"chunk_tokens must be >= 2, got {chunk_tokens}")
    ids = tokenizer.encode(sep.join(texts))
    n = 3 * chunk_tokens
    out = []
    for s in range(0, len(ids) - n + 1, n):
        w = ids[s: s + n]
        out.append((w[:chunk_tokens], w[chunk_tokens: 2 * chunk_tokens], w[2 * chunk_tokens:]))
        if len(out) == documents:
            break
    if not out:
        raise ValueError(f"the texts hold {len(ids)} tokens, fewer than 3 x {chunk_tokens}; give longer texts")
    return out


def decay_table(model, chunks: Sequence[tuple], progress: Progress | None = None) -> dict:
    """Mean loss per method over many (c1, c2, test) chunks, and how often each method beats
    the next in the paper's order. Returns {"mean_loss", "wins": {"a_decay<mean": frac, ...}, "n",
    "order" (by mean loss)}."""
    progress = progress or _noop
    rows = []
    for i, (c1, c2, t) in enumerate(chunks):
        rows.append(decay_comparison(model, c1, c2, t).losses)
        progress(i + 1, len(chunks))
    mean = {m: float(np.mean([r[m] for r in rows])) for m in DECAY_METHODS}
    pairs = [("concat", "a_decay"), ("a_decay", "mean"), ("a_decay", "c2_only"), ("mean", "c2_only")]
    wins = {f"{a}<{b}": float(np.mean([r[a] < r[b] for r in rows])) for a, b in pairs}
    return {"mean_loss": mean, "wins": wins, "n": len(rows), "order": sorted(mean, key=mean.get)}
