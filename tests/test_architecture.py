"""The package's architecture, checked from its source: picaso_core's import graph (every import,
also those inside functions) has no circle, and imports run downward only:

    ui                                  the Gradio tabs
    analysis · finetune · lab · plots   what the app shows (may import each other, without circles)
    store · retrieval                   the database of states, and what to fetch from it
    compose · data                      the composition methods; the corpora
    engine                              the model, its state, decoding, loading
    assets                              where the bundled files are

The graph is built with `ast`, so nothing is imported to check it. Importing `a.b.c` also runs
`a/b/__init__.py`: a module that imports into a package from outside it depends on that package's
__init__ too (the top-level facade picaso_core/__init__.py, whose imports are lazy, excepted). A
package's __init__ may import its own modules.

Every `python -m picaso_core...` command that the README and docs/ show answers `--help` with exit 0.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "picaso_core"

TIER = {"assets": 0, "engine": 1, "compose": 2, "data": 2, "store": 3, "retrieval": 3,
        "analysis": 4, "finetune": 4, "lab": 4, "plots": 4, "session": 5, "experiments": 5, "ui": 6, "space": 7}


def modules(pkg: Path = PKG) -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, is a package's __init__) for every .py file under `pkg`."""
    out = {}
    for path in pkg.rglob("*.py"):
        parts = list(path.relative_to(pkg.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return out


def import_graph(pkg: Path = PKG) -> dict[str, set[str]]:
    """module -> the picaso_core modules it imports (at any depth of its code, relative imports
    resolved; `from a import b` counts as importing the module a.b where there is one)."""
    mods = modules(pkg)
    top = pkg.name

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for name, (path, is_pkg) in mods.items():
        here = name if is_pkg else name.rpartition(".")[0]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = here.split(".")[: len(here.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                targets = [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            deps |= {r for t in targets if t == top or t.startswith(top + ".") for r in [resolve(t)] if r}
        deps |= {pkg for d in deps for pkg in _packages_above(d) if not (name + ".").startswith(pkg + ".")}
        deps.discard(name)
        deps.discard(top)  # the lazy facade
        graph[name] = deps
    return graph


def _packages_above(module: str) -> list[str]:
    """The packages whose __init__ runs before `module` when it is imported from outside them."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(2, len(parts))]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def layer(module: str) -> str:
    return module.split(".")[1] if "." in module else ""


def upward(graph: dict[str, set[str]]) -> list[str]:
    """'a -> b' for every import from a lower tier to a higher one, or between two tiers' equals
    that are not allowed to meet (engine imports nothing of picaso_core but assets)."""
    bad = []
    for a, deps in graph.items():
        la = layer(a)
        if la not in TIER:
            continue
        for b in deps:
            lb = layer(b)
            if lb == la or lb not in TIER:
                continue
            if TIER[lb] > TIER[la] or (TIER[lb] == TIER[la] and TIER[la] < 4):
                bad.append(f"{a} -> {b}")
    return sorted(bad)


def test_every_subpackage_has_a_tier():
    """A new top-level module or subpackage must be placed in the architecture (TIER) to be checked."""
    found = {layer(m) for m in modules() if "." in m}
    assert found <= set(TIER), f"place {sorted(found - set(TIER))} in TIER (tests/test_architecture.py)"


def test_no_import_cycles():
    assert cycles(import_graph()) == []


def test_imports_run_downward():
    assert upward(import_graph()) == []


def test_engine_imports_nothing_above_it():
    graph = import_graph()
    engine = {m: deps for m, deps in graph.items() if layer(m) == "engine"}
    assert engine, "no picaso_core.engine modules found"
    above = {f"{m} -> {d}" for m, deps in engine.items() for d in deps if layer(d) not in ("engine", "assets")}
    assert above == set()


def test_only_ui_imports_gradio():
    """The core and the figure builders run without a web framework (scripts, tests, the HTML report)."""
    offenders = []
    for name, (path, _) in modules().items():
        if layer(name) == "ui":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{name} imports {n}" for n in names if n.split(".")[0] == "gradio"]
    assert offenders == []


# ---- the checker itself, on small packages written here ----------------------------------------
def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / "picaso_core" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root / "picaso_core"


def test_checker_finds_a_circle_through_a_function_level_import(tmp_path):
    pkg = _write(tmp_path, {"__init__.py": "", "engine/__init__.py": "",
                            "engine/model.py": "from picaso_core.engine.state import S\n",
                            "engine/state.py": "def f():\n    from picaso_core.engine import model\n"})
    assert cycles(import_graph(pkg)) == [["picaso_core.engine.model", "picaso_core.engine.state"]]


def test_checker_finds_a_circle_through_a_package_init(tmp_path):
    """training -> lab.coffee.model runs lab/coffee/__init__.py, which imports training back."""
    pkg = _write(tmp_path, {"__init__.py": "", "lab/__init__.py": "",
                            "lab/coffee/__init__.py": "from picaso_core.lab.training import train\n",
                            "lab/coffee/model.py": "", "lab/training.py": "from picaso_core.lab.coffee.model import M\n"})
    assert cycles(import_graph(pkg)) == [["picaso_core.lab.coffee", "picaso_core.lab.training"]]
    pkg = _write(tmp_path, {"lab/coffee/__init__.py": "from picaso_core.lab.coffee.model import M\n"})
    assert cycles(import_graph(pkg)) == []  # a package's __init__ re-exporting its own module


def test_checker_finds_an_upward_import(tmp_path):
    pkg = _write(tmp_path, {"__init__.py": "", "engine/__init__.py": "", "engine/model.py": "",
                            "analysis/__init__.py": "", "analysis/soup.py": "import picaso_core.engine.model\n",
                            "engine/loading.py": "from ..analysis import soup\n", "compose.py": "",
                            "data/__init__.py": "from picaso_core import compose\n"})
    assert upward(import_graph(pkg)) == ["picaso_core.data -> picaso_core.compose",
                                         "picaso_core.engine.loading -> picaso_core.analysis",
                                         "picaso_core.engine.loading -> picaso_core.analysis.soup"]


# ---- the documented entry points ---------------------------------------------------------------
def documented_entry_points() -> list[str]:
    """`python -m picaso_core.x [subcommand]` as the README and docs/*.md write them."""
    texts = [(ROOT / "README.md").read_text(encoding="utf-8")]
    texts += [p.read_text(encoding="utf-8") for p in sorted((ROOT / "docs").glob("*.md"))]
    found = set()
    for text in texts:
        for m in re.finditer(r"python -m (picaso_core(?:\.\w+)+)((?: [a-z][\w-]*)?)", text):
            sub = m.group(2).strip()
            found.add(f"{m.group(1)} {sub}".strip() if sub in ("build",) else m.group(1))
    return sorted(found)


ENTRY_POINTS = documented_entry_points()


def test_docs_show_the_entry_points():
    assert {"picaso_core.store build", "picaso_core.experiments", "picaso_core.lab.coffee"} <= set(ENTRY_POINTS)


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_entry_point_answers_help(entry, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    r = subprocess.run([sys.executable, "-m", *entry.split(), "--help"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "usage:" in r.stdout
