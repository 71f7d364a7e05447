"""The composition methods' one home: each method's name, label, colour and what it is, in one record.

Every module that lists, labels or draws a method reads this table: the analyses (evaluate, the
compose cache's keys, the summaries), the figures (plots/), the app's tabs and the tour. Torch-free
(it is on `--help`'s path); `build.build_state` builds any method's state.

    name     the method's id in code, records and the HTTP API ("picaso_r")
    label    what the app shows ("PICASO-R"); "none" reads "No context" there, and `label(name, style)`
             gives the baseline's other wordings (BASELINE)
    colour   one colour per method, in every figure and the tour: each has a contrast of at least 3:1
             on white and on the dark theme's background (#0b0f19), and all stay apart under the
             three colour-vision deficiencies (tests/test_compose_registry.py checks both)
    kind     "none" (the empty state), "state" (composed from stored states, no forward pass) or
             "tokens" (the model re-reads the contexts' tokens)
    order    the invariance the method has, which the compose cache's keys follow
             (analysis/compose_cache.py): "set" (any permutation), "rotation" (cyclic shifts),
             "sequence" (order-dependent); None for the empty state
    needs    what building it takes: "states" (the contexts' stored states), "tokens" (their token
             ids), "weights" (the caller's), "attention" (a hybrid's attention layers). PICConcat-R
             starts each rotation from a stored state when it is given, but encodes it otherwise
    cached   the compose cache keeps its states (the six paper methods)
    paper    one line: what it is, with the paper's section
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

__all__ = ["Method", "REGISTRY", "BASELINE", "ABLATION", "method", "by_label", "label", "labels", "colour",
           "methods_for", "names"]

KINDS = ("none", "state", "tokens")
ORDERS = ("set", "rotation", "sequence")
NEEDS = ("states", "tokens", "weights", "attention")


@dataclass(frozen=True)
class Method:
    """One composition method (see the module docstring for the fields)."""

    name: str
    label: str
    colour: str
    kind: str
    order: str | None
    needs: tuple[str, ...]
    cached: bool
    paper: str

    def __post_init__(self) -> None:
        if self.kind not in KINDS or (self.order is not None and self.order not in ORDERS):
            raise ValueError(f"{self.name}: kind {self.kind!r} / order {self.order!r}")
        if not set(self.needs) <= set(NEEDS):
            raise ValueError(f"{self.name}: needs {self.needs!r}; valid: {NEEDS}")


ABLATION = "picaso_r_drop"  # a hybrid's extra row: PICASO-R with the attention layers' keys and values dropped

METHODS: tuple[Method, ...] = (  # in display order
    Method("none", "No context", "#64748b", "none", None, (), False,
           "the query alone: the baseline every method should beat"),
    Method("concat", "Concat", "#3b82f6", "tokens", "sequence", ("tokens", "states"), True,
           "process the contexts' tokens after the first one's stored state (sec. 6.2)"),
    Method("soup", "Soup", "#0891b2", "state", "set", ("states",), True,
           "the plain mean of the stored states"),
    Method("caso", "CASO", "#0f766e", "state", "sequence", ("states",), True,
           "x_n + Σ A_n⋯A_{i+1} x_i: Concat's state for one layer, from states alone (eq. 3)"),
    Method("picaso_s", "PICASO-S", "#d97706", "state", "set", ("states",), True,
           "CASO averaged over all n! orders, in closed form (prop. 2)"),
    Method("picaso_r", "PICASO-R", "#c2410c", "state", "rotation", ("states",), True,
           "CASO averaged over the n cyclic orders (prop. 3)"),
    Method("picconcat_r", "PICConcat-R", "#7c3aed", "tokens", "rotation", ("tokens",), True,
           "mean state of the n rotated concatenations: most accurate, most costly"),
    Method("weighted", "Weighted", "#16a34a", "state", "sequence", ("states", "weights"), False,
           "Σ_k w_k x_k with the caller's weights (State Soup's weighted mean, task arithmetic)"),
    Method(ABLATION, "PICASO-R, attention dropped", "#c026d3", "state", "rotation", ("states", "attention"), False,
           "PICASO-R's SSM part with the attention layers' keys and values dropped (hybrid models): what they carry"),
)
REGISTRY = METHODS  # the package face's name for the records (compose.METHODS is methods.py's state methods)

# the baseline's wordings by view: the app's label, the evaluation tables' short one, the experiments'
# figures, the paper-vs-ours and benchmark tables, the paper's table 1
BASELINE = {"app": "No context", "short": "None", "plot": "None (baseline)", "table": "Baseline (none)",
            "paper": "Naive"}

_BY_NAME = {m.name: m for m in METHODS}
_BY_LABEL = {m.label: m for m in METHODS} | {w: _BY_NAME["none"] for w in BASELINE.values()}


def method(name: str) -> Method:
    """The record of `name` ("picaso_r"); ValueError naming the valid names otherwise."""
    try:
        return _BY_NAME[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown method {name!r}; valid: {', '.join(_BY_NAME)}") from None


def by_label(text: str) -> Method:
    """The record whose label (or, for the baseline, any of its BASELINE wordings) is `text`."""
    try:
        return _BY_LABEL[text]
    except (KeyError, TypeError):
        raise ValueError(f"unknown method label {text!r}; valid: {', '.join(_BY_LABEL)}") from None


def label(name: str, style: str = "app") -> str:
    """The label of method `name`; for "none" the wording of `style` (a key of BASELINE)."""
    if style not in BASELINE:
        raise ValueError(f"style={style!r}: valid values are {tuple(BASELINE)}")
    return BASELINE[style] if name == "none" else method(name).label


def labels(names: Iterable[str] | None = None, style: str = "app") -> tuple[str, ...]:
    """The labels of `names` (None: every method, in display order)."""
    return tuple(label(n, style) for n in (names if names is not None else (m.name for m in METHODS)))


def colour(name_or_label: str) -> str:
    """The colour of a method, by name or by label."""
    return (_BY_NAME.get(name_or_label) or by_label(name_or_label)).colour


def methods_for(has_attention: bool = False) -> tuple[Method, ...]:
    """The rows a model shows, in display order: every method that needs no caller's weights, and
    the attention ablation only where the model has attention layers (a hybrid)."""
    return tuple(m for m in METHODS if "weights" not in m.needs and ("attention" not in m.needs or has_attention))


def names(methods: Iterable[Method] | None = None, *, kind: str | None = None) -> tuple[str, ...]:
    """The names of `methods` (None: the rows of a model without attention, `methods_for()`),
    those of `kind` only when given."""
    if kind is not None and kind not in KINDS:
        raise ValueError(f"kind={kind!r}: valid values are {KINDS}")
    return tuple(m.name for m in (methods_for() if methods is None else methods) if kind is None or m.kind == kind)
