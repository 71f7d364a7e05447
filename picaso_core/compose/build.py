"""`build_state`: the state any method of the registry builds from the contexts, the one builder the
evaluation, the compose cache and the app's ablation row share.

Torch and the math (methods.py) are imported on the first call, so that the torch-free modules that
import this one (analysis/evaluate.py, on the experiments command's `--help` path) stay light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from picaso_core.compose.registry import ABLATION, method as _record

if TYPE_CHECKING:
    from picaso_core.engine.state import ContextState

__all__ = ["build_state"]


def build_state(model, method: str, contexts: Sequence[Sequence[int]], states: Sequence | None = None,
                threads: int = 1, *, weights=None) -> ContextState:
    """The state `method` (a registry name) builds from `contexts`, in presentation order.

    Args:
        model: an SSMLanguageModel (the token methods run it; the state methods read its RoPE).
        method: "none" (the empty state), a state method (soup, caso, picaso_s, picaso_r, weighted;
            `compose(method, states, config=model)`), a token method (concat, picconcat_r;
            `compose_tokens`), or the ablation "picaso_r_drop" (PICASO-R with a hybrid's attention
            keys and values dropped).
        contexts: the contexts' token ids; none given: the empty state, whatever the method (the
            composition of no context is the identity).
        states: the contexts' stored states, in the same order (the token methods start from them;
            None: encoded there).
        threads: picconcat_r's rotation groups (see `compose_tokens`).
        weights: "weighted" only: one real weight per context.
    Raises:
        ValueError for a name the registry does not know.
    """
    rec = _record(method)
    if rec.kind == "none" or not contexts:
        return model.empty_state()
    from picaso_core.compose.methods import compose, compose_tokens  # torch: on first use, not on --help's path

    if rec.name == ABLATION:  # PICASO-R's SSM part; the attention layers' keys and values dropped
        return compose("picaso_r", states, attention="drop", config=model)
    if rec.kind == "state":  # the model: a RoPE hybrid's keys re-rotated to their joined offsets
        return compose(rec.name, states, config=model, **({"weights": weights} if rec.name == "weighted" else {}))
    return compose_tokens(model, contexts, rec.name, states=states, threads=threads)
