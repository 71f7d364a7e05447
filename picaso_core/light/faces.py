"""A package's lazy face (PEP 562): its public names, each imported from its module on first use.

    __getattr__, __dir__, __all__ = lazy_face(__name__, {"module": ("Name", ...), ...})

Used where importing the package must stay cheap because a torch-free path runs through it
(`import picaso_core`, a command's `--help`); docs/api.md says which faces are lazy.
"""

from __future__ import annotations

import sys
from importlib import import_module


def lazy_face(package: str, face: dict[str, tuple[str, ...]]):
    """(__getattr__, __dir__, __all__) for `package`, whose public names are `face`'s (module ->
    names). A name is imported from its module on first access and kept on the package."""
    where = {name: module for module, names in face.items() for name in names}

    def __getattr__(name: str):
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(f"{package}.{where[name]}"), name)
        setattr(sys.modules[package], name, value)  # the next lookup is a plain attribute
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(where))

    return __getattr__, __dir__, list(where)
