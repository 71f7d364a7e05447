"""docs/api.md is the one list of the public API: every name it lists imports from its package as
written there, each package's `__all__` is exactly the names it lists, and `import picaso_core`
(and the lazy faces) still run without torch."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
API = ROOT / "docs" / "api.md"
LAZY = ("picaso_core.engine", "picaso_core.compose", "picaso_core.retrieval", "picaso_core.analysis", "picaso_core.finetune",
        "picaso_core.lab", "picaso_core.lab.coffee", "picaso_core.store")


def sections(text: str) -> dict[str, dict]:
    """package -> {"imports": [import lines], "imported": [names], "listed": [table names]}."""
    out = {}
    parts = re.split(r"^## `(picaso_core[\w.]*)`\s*$", text, flags=re.M)
    for pkg, body in zip(parts[1::2], parts[2::2]):
        code = "\n".join(re.findall(r"```python\n(.*?)```", body, flags=re.S))
        imports = [line for line in code.splitlines() if line.strip()]
        imported = []
        for line in imports:
            m = re.fullmatch(r"from ([\w.]+) import ([\w, ]+)", line.strip())
            assert m, f"docs/api.md, {pkg}: not a one-line `from ... import ...`: {line!r}"
            assert m.group(1) == pkg, f"docs/api.md, {pkg}: {line!r} imports from another package"
            imported += [n.strip() for n in m.group(2).split(",")]
        listed = re.findall(r"^\| `(\w+)` \|", body, flags=re.M)
        out[pkg] = {"imports": imports, "imported": imported, "listed": listed}
    return out


DOC = sections(API.read_text(encoding="utf-8"))


def test_every_package_face_is_documented():
    """Each package under picaso_core but the UI has its section (a new face cannot go unlisted)."""
    pkgs = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "picaso_core").rglob("__init__.py")}
    pkgs = {p for p in pkgs if not p.startswith("picaso_core.ui")}
    assert pkgs <= set(DOC), f"add {sorted(pkgs - set(DOC))} to docs/api.md"


@pytest.mark.parametrize("pkg", sorted(DOC))
def test_the_doc_lists_each_name_once_in_its_import_lines_and_its_table(pkg):
    sec = DOC[pkg]
    assert sec["listed"], f"docs/api.md lists no names for {pkg}"
    assert len(sec["listed"]) == len(set(sec["listed"])), f"{pkg}: a name listed twice"
    assert sec["imported"] == sec["listed"], f"{pkg}: the import lines and the table differ"


@pytest.mark.parametrize("pkg", sorted(DOC))
def test_every_listed_name_imports_as_documented(pkg):
    namespace: dict = {}
    for line in DOC[pkg]["imports"]:
        exec(line, namespace)  # the line a user writes
    module = importlib.import_module(pkg)
    for name in DOC[pkg]["listed"]:
        assert namespace[name] is getattr(module, name)


@pytest.mark.parametrize("pkg", sorted(DOC))
def test_all_is_what_the_doc_lists(pkg):
    module = importlib.import_module(pkg)
    assert len(module.__all__) == len(set(module.__all__)), f"{pkg}.__all__ names something twice"
    assert set(module.__all__) == set(DOC[pkg]["listed"]), (
        f"{pkg}.__all__ and docs/api.md differ: only in __all__ {sorted(set(module.__all__) - set(DOC[pkg]['listed']))}, "
        f"only in the doc {sorted(set(DOC[pkg]['listed']) - set(module.__all__))}")


@pytest.mark.parametrize("pkg", LAZY)
def test_a_lazy_face_shows_its_imports_to_the_architecture_check(pkg):
    """A lazy face's `if TYPE_CHECKING:` imports name exactly its __all__, so tests/test_architecture.py
    sees the modules the face imports on first use."""
    module = importlib.import_module(pkg)
    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    shown = {a.name for node in tree.body if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING"
             for stmt in node.body if isinstance(stmt, ast.ImportFrom) for a in stmt.names}
    assert shown == set(module.__all__)


def test_import_picaso_core_and_the_lazy_faces_do_not_import_torch():
    code = ("import sys\nimport picaso_core\nassert 'torch' not in sys.modules, 'import picaso_core imported torch'\n"
            + "".join(f"import {p}\nassert 'torch' not in sys.modules, 'import {p} imported torch'\n" for p in LAZY))
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]


def test_the_engine_api_links_the_list():
    assert "(api.md)" in (ROOT / "docs" / "ENGINE_API.md").read_text(encoding="utf-8")
