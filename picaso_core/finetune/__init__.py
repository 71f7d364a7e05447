"""Fine-tuning a model to use composed states (paper sec. 4): BPTC and BP2C.

    train.py      objectives, data and the accelerate trainer
    evaluate.py   the fine-tuned model against the base: gaps per k, skills, LM loss
    card.py       the model card written from an evaluation report

The face (docs/api.md lists every name) is lazy (PEP 562 `__getattr__`): a name imports its
module on first use, because card.py is torch-free (the app and the tests read the card without a
model) while train.py and evaluate.py import torch and the engine. The training function itself
is `picaso_core.finetune.train.train`: `picaso_core.finetune.train` is its module (what
`from picaso_core.finetune import train as FT` imports), so the face does not shadow it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from picaso_core.light.faces import lazy_face

if TYPE_CHECKING:  # the face's names, for type checkers and tests/test_architecture.py's import graph
    from picaso_core.finetune.card import model_card, report_markdown  # noqa: F401
    from picaso_core.finetune.evaluate import evaluate_model, evaluate_runs, model_source, paired_gaps  # noqa: F401
    from picaso_core.finetune.evaluate import skill_paired, write_card  # noqa: F401
    from picaso_core.finetune.train import OBJECTIVES, CompositionObjective, Example, FinetuneConfig  # noqa: F401
    from picaso_core.finetune.train import TrainResult, build_examples, lm_documents, save_checkpoint  # noqa: F401

_FACE = {
    "train": ("OBJECTIVES", "FinetuneConfig", "TrainResult", "Example", "CompositionObjective", "build_examples",
              "lm_documents", "save_checkpoint"),
    "evaluate": ("evaluate_model", "evaluate_runs", "paired_gaps", "skill_paired", "model_source", "write_card"),
    "card": ("model_card", "report_markdown"),
}
__getattr__, __dir__, __all__ = lazy_face(__name__, _FACE)
