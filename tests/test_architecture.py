"""The package's architecture, checked from its source: picaso_core's import graph (every import,
also those inside functions) has no circle, and imports run downward only:

    space                               a Hugging Face Space's folder per kind of hosting
    ui                                  the Gradio app, in three wings (below)
    session · experiments               what loads once (Resources); the experiments command
    analysis · finetune · lab · plots   what the app shows (may import each other, without circles)
    store · retrieval                   the database of states, and what to fetch from it
    compose · data                      the composition methods (and their registry); the corpora
    engine                              the model, its state, decoding, loading
    light                               standard-library-only helpers: assets, defaults, deadline, memory,
                                        faces (where the bundled files are, the flags' defaults, a job's
                                        time limit, the caches' sizes, a package's lazy face)

The graph is built with `ast`, so nothing is imported to check it. Importing `a.b.c` also runs
`a/b/__init__.py`: a module that imports into a package from outside it depends on that package's
__init__ too (the top-level facade picaso_core/__init__.py, whose imports are lazy, excepted). A
package's __init__ may import its own modules.

Inside ui/, the wings (tabs/, tour/, server/ and the shared modules at ui/'s top) follow their own
rules: no tab imports another tab; the tour's steps import nothing of the UI; the server imports no
tab and nothing of the tour; the shared modules import no wing but the server. No module is longer
than MAX_LINES.

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

TIER = {"light": 0, "engine": 1, "compose": 2, "data": 2, "store": 3, "retrieval": 3, "analysis": 4, "finetune": 4, "lab": 4, "plots": 4,
        "session": 5, "experiments": 5, "ui": 6, "space": 7}


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
    that are not allowed to meet (engine imports nothing of picaso_core but the light helpers)."""
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
    above = {f"{m} -> {d}" for m, deps in engine.items() for d in deps
             if layer(d) not in ("engine", "light")}
    assert above == set()


# ---- inside ui/: the three wings ----------------------------------------------------------------
MAX_LINES = 500


def wing(module: str) -> str | None:
    """'tabs', 'tour', 'server' or 'shared' (ui's top modules) for a module of picaso_core.ui; None
    for anything else, the packages ui, ui.tabs, ui.tour and ui.server included (their __init__s
    import nothing: test_the_package_inits_of_the_wings_import_nothing)."""
    parts = module.split(".")
    if parts[:2] != ["picaso_core", "ui"] or len(parts) < 3:
        return None
    if parts[2] in ("tabs", "tour", "server"):
        return parts[2] if len(parts) > 3 else None
    return "shared"


def tab_of(module: str) -> str | None:
    """The tab a module of ui/tabs/ belongs to: its name up to the first '_' (compose_runs -> compose)."""
    parts = module.split(".")
    return parts[3].split("_")[0] if wing(module) == "tabs" else None


def wing_violations(graph: dict[str, set[str]]) -> list[str]:
    """'a -> b (why)' for every import inside ui/ that breaks a wing rule."""
    bad = []
    for a, deps in graph.items():
        for b in deps:
            wa, wb = wing(a), wing(b)
            if wa == "tabs" and wb == "tabs" and tab_of(a) != tab_of(b):
                bad.append(f"{a} -> {b} (a tab imports another tab)")
            if a.endswith(".ui.tour.steps") and (b.startswith("picaso_core.ui.") or b == "picaso_core.ui"):
                bad.append(f"{a} -> {b} (the tour's steps import no UI)")
            if wa == "server" and wb in ("tabs", "tour", "shared"):
                bad.append(f"{a} -> {b} (the server imports no tab, tour or shared module)")
            if wa == "shared" and wb in ("tabs", "tour"):
                bad.append(f"{a} -> {b} (what every tab shares imports no tab or tour module)")
    return sorted(bad)


def test_ui_is_in_three_wings():
    """Every module of ui/ is in a wing or among the shared modules, each wing a package."""
    mods = modules()
    for name in ("tabs", "tour", "server"):
        assert mods.get(f"picaso_core.ui.{name}", (None, False))[1], f"ui/{name}/ is not a package"
    loose = sorted(m for m in mods if wing(m) == "shared" and m.count(".") > 2)
    assert loose == [], f"ui/ subpackages outside the three wings: {loose}"


def test_the_wings_import_as_the_rules_say():
    assert wing_violations(import_graph()) == []


def test_tour_steps_import_nothing_of_the_ui_or_gradio():
    """The static site and the tour's story read the steps without Gradio (checked on the source
    and by importing it in a fresh interpreter)."""
    steps = PKG / "ui" / "tour" / "steps.py"
    graph = import_graph()
    assert {d for d in graph["picaso_core.ui.tour.steps"] if d.startswith("picaso_core.ui")} <= {"picaso_core.ui.tour"}
    code = ("import sys; import picaso_core.ui.tour.steps as s; "
            "assert s.STEPS and 'gradio' not in sys.modules, sorted(m for m in sys.modules if m.startswith('gradio'))")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "import gradio" not in steps.read_text(encoding="utf-8")


def test_the_package_inits_of_the_wings_import_nothing():
    """Importing one module of a wing runs the wing's __init__ first: they stay empty, so the tour's
    steps (or the server's gpu decorator, which a ZeroGPU Space imports before torch) pull in nothing."""
    for name in ("ui", "ui.tabs", "ui.tour", "ui.server"):
        tree = ast.parse((PKG / name.replace(".", "/") / "__init__.py").read_text(encoding="utf-8"))
        assert not [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))], name


def test_no_module_is_longer_than_the_limit():
    files = [*PKG.rglob("*.py"), ROOT / "app.py"]
    long = {str(p.relative_to(ROOT)): n for p in files
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}


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
def test_checker_finds_each_wing_violation(tmp_path):
    pkg = _write(tmp_path, {
        "__init__.py": "", "ui/__init__.py": "", "ui/tabs/__init__.py": "", "ui/tour/__init__.py": "",
        "ui/server/__init__.py": "", "ui/errors.py": "from picaso_core.ui.server import serving\n",
        "ui/tabs/compose.py": "from picaso_core.ui.tabs import compose_runs\n", "ui/tabs/compose_runs.py": "",
        "ui/tabs/soup.py": "def f():\n    from picaso_core.ui.tabs.compose import x\n",
        "ui/tour/steps.py": "from picaso_core.ui import errors\n",
        "ui/tour/runs.py": "from picaso_core.ui.tabs import compose\n",
        "ui/server/serving.py": "from picaso_core.ui.tour import runs\n",
        "ui/layout.py": "from picaso_core.ui.tabs import soup\n"})
    assert wing_violations(import_graph(pkg)) == [
        "picaso_core.ui.layout -> picaso_core.ui.tabs.soup (what every tab shares imports no tab or tour module)",
        "picaso_core.ui.server.serving -> picaso_core.ui.tour.runs (the server imports no tab, tour or shared module)",
        "picaso_core.ui.tabs.soup -> picaso_core.ui.tabs.compose (a tab imports another tab)",
        "picaso_core.ui.tour.steps -> picaso_core.ui.errors (the tour's steps import no UI)"]
    assert tab_of("picaso_core.ui.tabs.compose_runs") == tab_of("picaso_core.ui.tabs.compose") == "compose"



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


# ---- callers ask the model's layout, never re-derive "hybrid or pure" -----------------------------------
# After loading, `model.layout` (engine/layout.py: has_attention, pure_ssm, ssm_kind, ssm_layers ...) and a
# state's `has_attention` answer what kind of model and state a caller holds. Outside the engine (and the
# composition methods, which read a state's parts themselves) no code asks a model's or config's class, or
# re-derives the answer from a state's keys, a copied `hybrid` flag, the family's name or a hybrid
# config's layer lists; at most MAX_REDERIVED such sites remain, each with a comment saying why.
MODEL_CLASSES = {"SSMLanguageModel", "HybridLanguageModel", "LanguageModel", "ModelConfig", "HybridConfig",
                 "MixerConfig"}
FAMILY_NAMES = {"Mamba1", "Mamba2", "nemotron_h", "granitemoehybrid", "bamba"}  # engine/layout.py FAMILIES
HYBRID_CONFIG_FIELDS = {"layer_types", "n_ssm_layers", "n_attn_layers"}
MAX_REDERIVED = 5


def sources_outside(*subpackages: str, pkg: Path = PKG, app: Path | None = ROOT / "app.py") -> dict[str, Path]:
    """Dotted name -> file of every module under `pkg` but those in picaso_core.<subpackage>, and app.py."""
    out = {name: path for name, (path, _) in modules(pkg).items()
           if not any(name == f"{pkg.name}.{s}" or name.startswith(f"{pkg.name}.{s}.") for s in subpackages)}
    if app is not None and app.exists():
        out["app"] = app
    return out


def _named(node: ast.AST) -> str | None:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None


def isinstance_on_model_classes(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) of each `isinstance(x, C)` / `isinstance(x, (C, D))` with C a model or config class
    (also as an attribute: `engine.HybridConfig`)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _named(node.func) == "isinstance" and len(node.args) == 2:
            kinds = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
            hit = sorted({n for n in map(_named, kinds) if n in MODEL_CLASSES})
            if hit:
                out.append((node.lineno, f"isinstance(..., {', '.join(hit)})"))
    return out


def rederived(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, idiom) of each site that re-derives what a model's layout answers: isinstance on a model or
    config class, `state.keys is (not) None`, a `.hybrid` attribute, a comparison with a family's name or
    a `.family`, a hybrid config's layer lists (`layer_types`, `n_ssm_layers`, `n_attn_layers`)."""
    out = isinstance_on_model_classes(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if (any(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops)
                    and any(_named(s) in ("keys", "values", "kv_len") and isinstance(s, ast.Attribute) for s in sides)
                    and any(isinstance(s, ast.Constant) and s.value is None for s in sides)):
                out.append((node.lineno, ".keys is (not) None"))
            elif (any(isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in node.ops)
                  and any((isinstance(s, ast.Attribute) and s.attr == "family")
                          or (isinstance(s, ast.Constant) and s.value in FAMILY_NAMES) for s in sides)):
                out.append((node.lineno, "a family's name compared"))
        elif isinstance(node, ast.Attribute) and node.attr == "hybrid":
            out.append((node.lineno, ".hybrid"))
        elif isinstance(node, ast.Attribute) and node.attr in HYBRID_CONFIG_FIELDS:
            out.append((node.lineno, f".{node.attr}"))
        elif isinstance(node, ast.Constant) and node.value in HYBRID_CONFIG_FIELDS:  # getattr(config, "layer_types")
            out.append((node.lineno, repr(node.value)))
    return sorted(set(out))


def _sites(find, files: dict[str, Path], root: Path = ROOT) -> list[str]:
    """'file:line: idiom  |  the line' of each site `find` finds in `files`."""
    out = []
    for _, path in sorted(files.items()):
        src = path.read_text(encoding="utf-8")
        lines = src.splitlines()
        out += [f"{path.relative_to(root).as_posix()}:{n}: {what}  |  {lines[n - 1].strip()}"
                for n, what in find(ast.parse(src))]
    return out


def test_no_isinstance_on_a_model_class_outside_the_engine():
    """Which kind of model a caller holds is its layout's answer (model.layout), not its class's."""
    found = _sites(isinstance_on_model_classes, sources_outside("engine"))
    assert found == [], ("isinstance on a model or config class outside picaso_core/engine/ (ask model.layout: "
                         "has_attention, pure_ssm, ssm_kind ...):\n" + "\n".join(found))


def test_layout_questions_are_asked_not_rederived():
    found = _sites(rederived, sources_outside("engine", "compose"))
    assert len(found) <= MAX_REDERIVED, (
        f"{len(found)} sites outside picaso_core/engine/ and compose/ re-derive what model.layout or a state's "
        f"has_attention answers (at most {MAX_REDERIVED}, each with a comment saying why):\n" + "\n".join(found))


def test_the_layout_checkers_find_each_idiom(tmp_path):
    pkg = _write(tmp_path, {"__init__.py": "", "engine/__init__.py": "",
                            "engine/model.py": "def f(m, HybridConfig):\n    return isinstance(m, HybridConfig)\n",
                            "ui/__init__.py": "",
                            "ui/tab.py": (
                                "from picaso_core import engine\n"
                                "def f(res, state, cfg, m):\n"
                                "    a = isinstance(m, (int, engine.HybridLanguageModel))\n"
                                "    b = state.keys is None or state.values is not None\n"
                                "    c = res.hybrid and cfg.family == 'Mamba2' and cfg.ssm_cfg.layer != 'Mamba1'\n"
                                "    d = getattr(cfg, 'layer_types', None) or cfg.n_ssm_layers\n"
                                "    e = res.layout.has_attention and state.has_attention and res.layout.pure_ssm\n"
                                "    return a, b, c, d, e\n")})
    files = sources_outside("engine", pkg=pkg, app=None)
    assert sorted(files) == ["picaso_core", "picaso_core.ui", "picaso_core.ui.tab"]
    assert _sites(isinstance_on_model_classes, files, tmp_path) == [
        "picaso_core/ui/tab.py:3: isinstance(..., HybridLanguageModel)  |  "
        "a = isinstance(m, (int, engine.HybridLanguageModel))"]
    assert [s.split("  |")[0] for s in _sites(rederived, files, tmp_path)] == [
        f"picaso_core/ui/tab.py:{n}: {what}" for n, what in [
            (3, "isinstance(..., HybridLanguageModel)"), (4, ".keys is (not) None"), (5, ".hybrid"),
            (5, "a family's name compared"), (6, "'layer_types'"), (6, ".n_ssm_layers")]]
    assert _sites(isinstance_on_model_classes, sources_outside(pkg=pkg, app=None), tmp_path)[0].startswith(
        "picaso_core/engine/model.py:2: isinstance(..., HybridConfig)")  # inside the engine: asked there
