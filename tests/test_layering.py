"""The import graph of src/vramlens, read from the ASTs: no underscored name crosses a module, no cycles.

Both rules are from docs/architecture.md. Every import counts, top-level or inside a function: a function-level
import hides a cycle from the interpreter, not from the reader.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "vramlens"


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES: dict[str, Path] = {module_name(p): p for p in sorted((SRC / PACKAGE).rglob("*.py"))}


def imports_of(name: str) -> list[tuple[str, tuple[str, ...], int]]:
    """(imported module, names taken from it, line) for every import in module `name`, resolved to absolute."""
    path = MODULES[name]
    is_package = path.name == "__init__.py"
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out += [(alias.name, (), node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package that holds this module
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            out.append((base, tuple(alias.name for alias in node.names), node.lineno))
    return out


def edges() -> dict[str, set[str]]:
    """module -> the vramlens modules it imports (`from pkg import sub` counts as importing pkg.sub)."""
    graph: dict[str, set[str]] = {name: set() for name in MODULES}
    for name in MODULES:
        for target, names, _line in imports_of(name):
            if target.split(".")[0] != PACKAGE:
                continue
            submodules = {f"{target}.{n}" for n in names if f"{target}.{n}" in MODULES}
            if submodules:
                graph[name] |= submodules
            if not names or len(submodules) < len(names):
                graph[name].add(target)
    for name in graph:
        graph[name].discard(name)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_no_underscored_name_is_imported_from_another_module():
    bad = []
    for name in MODULES:
        for target, names, line in imports_of(name):
            if target == "__future__" or target == name:
                continue
            bad += [f"{MODULES[name].relative_to(SRC)}:{line}: from {target} import {n}"
                    for n in names if n.startswith("_") and not n.startswith("__")]
    assert bad == [], "promote these to a public name in their package's seam:\n" + "\n".join(bad)


def test_the_import_graph_has_no_cycle():
    assert cycles(edges()) == []


def test_the_checks_can_fail():
    """The cycle finder and the name rule see what they must (a hand-made graph, a parsed snippet)."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    tree = ast.parse("def f():\n    from vramlens.trace.api import _workload\n")
    (node,) = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert [a.name for a in node.names] == ["_workload"]


def test_every_module_is_seen():
    assert {"vramlens", "vramlens.units", "vramlens.estimator.core", "vramlens.advise.search"} <= set(MODULES)
