"""docs/architecture.md places every module of the engine and of the compose package, and the top
level holds packages plus at most three modules (issue 56)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")


def placed() -> set[str]:
    """The file names that head an entry of the page's "What is where" tree: `  name.py   what it is`
    or `  a.py, b.py   what they are` (a name mentioned in a description does not count)."""
    where = PAGE.split("## What is where", 1)[1].split("\n## ", 1)[0]
    names = set()
    for line in where.splitlines():
        m = re.match(r"^\s+([\w.*]+\.py(?:, [\w.*]+\.py)*)\s{2,}", line)
        if m:
            names |= {n.strip() for n in m.group(1).split(",")}
    return names


def test_every_engine_module_is_placed_in_the_architecture_page():
    names, missing = placed(), []
    for pkg in ("engine", "compose", "light"):
        for path in sorted((ROOT / "picaso_core" / pkg).rglob("*.py")):
            if path.name == "__init__.py":
                continue
            rel = path.relative_to(ROOT / "picaso_core" / pkg)
            if path.name not in names and not any(n.endswith("*.py") and path.name.startswith(n[:-4]) for n in names):
                missing.append(str(rel))
    assert missing == [], f"docs/architecture.md does not place {missing}"


def test_the_top_level_holds_packages_and_at_most_three_modules():
    modules = sorted(p.name for p in (ROOT / "picaso_core").glob("*.py"))
    assert len(modules) <= 3, f"picaso_core/ holds {modules}: put small utilities in a package"
