"""Teaching labs behind the app's explanatory tabs: small, checkable computations (the SSM primer)
and small models trained live (the COFFEE lab).

Modules here may use the engine (model, scan) and read its internals; the engine never imports
them (picaso_core.engine.scan / model / state / loading stay free of lab, UI and plotting code).

The face (docs/api.md lists every name; the COFFEE layers are picaso_core.lab.coffee's) is lazy
(PEP 562 `__getattr__`): a name imports its module on first use, because
`python -m picaso_core.lab.coffee` runs this file first and needs training.py only, while primer.py
imports the engine's model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from picaso_core.light.faces import lazy_face

if TYPE_CHECKING:  # the face's names, for type checkers and tests/test_architecture.py's import graph
    from picaso_core.lab.complexity import SERIES, loglog_slope, measure_complexity  # noqa: F401
    from picaso_core.lab.primer import decay_profile, demo_system, impulse_responses, lti_convolution  # noqa: F401
    from picaso_core.lab.primer import lti_convolution_fft, lti_kernel, lti_recurrence, memory_length  # noqa: F401
    from picaso_core.lab.primer import semiseparable, spectral_radius, toy_selective  # noqa: F401
    from picaso_core.lab.tasks import IHTask, check_ih, digits_data, ih0_sequences, ih_batch  # noqa: F401
    from picaso_core.lab.training import CLI_DEFAULTS, MODELS, TASKS, LabConfig, Run, applied_config  # noqa: F401
    from picaso_core.lab.training import ih0_trajectories, summary, train_iter  # noqa: F401

_FACE = {
    "training": ("TASKS", "MODELS", "CLI_DEFAULTS", "LabConfig", "Run", "train_iter", "summary", "applied_config",
                 "ih0_trajectories"),
    "tasks": ("IHTask", "ih_batch", "check_ih", "digits_data", "ih0_sequences"),
    "primer": ("demo_system", "spectral_radius", "lti_kernel", "lti_recurrence", "lti_convolution",
               "lti_convolution_fft", "memory_length", "impulse_responses", "decay_profile", "toy_selective",
               "semiseparable"),
    "complexity": ("SERIES", "measure_complexity", "loglog_slope"),
}
__getattr__, __dir__, __all__ = lazy_face(__name__, _FACE)
