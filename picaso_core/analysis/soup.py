"""State Soup (Pióro et al. 2024): a library of in-context skills kept as states, their features per
layer, and task retrieval by state similarity. Maps of the library (PCA, t-SNE, UMAP) are in
soup_projection, mixing of states in soup_mixing.

Glossary (paper -> code):
    skill / task τ        a skill task of picaso_core.data.skills ("antonym", ...; its label-shuffled
                          twin "<task>_shuffled" keeps the answers' distribution, drops the relation)
    k-shot demonstration  k lines "question → answer\\n" (skills.format_demos)
    library state         the state of one `shots`-shot demonstration of a task's TRAIN items
    q_τ^k                 the state of a k-shot demonstration of τ's TEST items (sec. 2.1)
    features              one layer of a state flattened: ssm [H*P*N] (Mamba-2) or conv [C*(K-1)]

Sections of the paper and the functions here:
    sec. 2.1, fig. 1, 4, 5   SkillLibrary, features, cluster_quality, retrieval_accuracy
                             (the maps: soup_projection.project)
    sec. 2.2-2.3, fig. 2-3   soup_mixing

Everything returns plain data (lists, dicts, numpy).
"""

from __future__ import annotations

import functools
import hashlib
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from picaso_core.data.skills import SHUFFLED_SUFFIX, format_demos, load_skill_tasks
from picaso_core.engine.state import ContextState
from picaso_core.store.store import StateStore

PARTS = ("ssm", "conv")
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
# Features (fig. 1 left, fig. 4-5)
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


def cluster_quality(lib: SkillLibrary, layers: Sequence[int] | None = None,
                    parts: Sequence[str] = PARTS) -> dict:
    """Per layer and part, how well the full (unprojected) states separate by task:
    1-NN task accuracy (leave-one-out, cosine) and the silhouette (cosine distance).
    Returns {"layers": [...], "chance": 1/#tasks, part: {"nn_accuracy": [...], "silhouette": [...]}}."""
    from sklearn.metrics import silhouette_score  # heavy, on first use: the quality figure only

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
