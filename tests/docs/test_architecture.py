"""docs/architecture.md cannot drift: its "may import" column is the package import graph the code has."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "vramlens"
DOC = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")


def package_graph() -> dict[str, set[str]]:
    """vramlens package -> the other vramlens packages (or ``vramlens.__version__``) it imports, anywhere."""
    graph: dict[str, set[str]] = {}
    for path in SRC.rglob("*.py"):
        parts = path.relative_to(SRC).parts
        if parts[0] in ("__init__.py", "__main__.py"):  # the front door, not a package
            continue
        me = parts[0].removesuffix(".py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [f"vramlens.{a.name}" for a in node.names] if node.module == "vramlens" else [node.module]
            for name in names:
                if name.startswith("vramlens."):
                    other = name.split(".")[1]
                    if other != me:
                        graph.setdefault(me, set()).add("vramlens.__version__" if other == "__version__" else other)
        graph.setdefault(me, set())
    return graph


def documented() -> dict[str, set[str] | None]:
    rows = re.findall(r"^\| (`[^|]+`) \| [^|]+ \| ([^|]+) \|$", DOC, re.M)
    out: dict[str, set[str] | None] = {}
    for packages, imports in rows:
        text = imports.strip()
        allowed = None if text.startswith("anything") else set() if text == "nothing" else {
            x.strip().strip("`") for x in text.split(",") if x.strip()}
        for p in re.findall(r"`([a-z_]+)`", packages):
            out[p] = allowed
    return out


def test_every_package_is_in_the_table():
    assert set(package_graph()) == set(documented())


def test_the_may_import_column_is_the_import_graph():
    doc = documented()
    for package, imports in package_graph().items():
        if doc[package] is not None:
            assert imports == doc[package], package
