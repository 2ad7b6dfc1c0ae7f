"""No import cycle among the repository's own modules, counting every import statement: module-level ones,
function-local ones and those under ``if TYPE_CHECKING:`` (a cycle hidden in a function is still a cycle).

``import a.b.c`` makes the importer depend on ``a.b.c`` only, not on the ``__init__`` of ``a`` or ``a.b``;
``from a.b import x`` depends on ``a.b.x`` when that is a module, else on ``a.b`` (the package's ``__init__``)."""

from __future__ import annotations

import ast
from collections.abc import Collection, Iterator
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).parents[1]
PACKAGES = ("platformctl", "upgrade_service", "e2e_canary", "ami", "infra", "release_pipeline")


def _modules() -> dict[str, Path]:
    """Every module of the packages, by dotted name (a package by its own name, for its ``__init__``)."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        base = ROOT / package
        if not (base / "__init__.py").is_file():
            continue
        for path in sorted(base.rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _imports(name: str, is_package: bool, source: str, modules: Collection[str]) -> Iterator[str]:
    """The modules among ``modules`` that module ``name`` (whose text is ``source``) imports, anywhere in it."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules:
                    yield alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = name.split(".") if is_package else name.split(".")[:-1]
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            for alias in node.names:
                if f"{base}.{alias.name}" in modules:
                    yield f"{base}.{alias.name}"
                elif base in modules:
                    yield base


def import_graph() -> nx.DiGraph:
    modules = _modules()
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for name, path in modules.items():
        for target in _imports(name, path.name == "__init__.py", path.read_text(), modules):
            if target != name:
                graph.add_edge(name, target)
    return graph


def test_every_import_statement_is_an_edge() -> None:
    modules = {"p", "p.a", "p.b", "p.b.c", "p.d", "p.e", "p.f", "q"}
    source = """
from __future__ import annotations
from typing import TYPE_CHECKING
import p.b.c
from p import a, not_a_module
from . import d
from .b import something
if TYPE_CHECKING:
    from p.e import Thing
def f():
    from p.f import helper
    import q
"""
    assert sorted(_imports("p.x", False, source, modules)) == ["p", "p.a", "p.b", "p.b.c", "p.d", "p.e", "p.f", "q"]
    # In a package's __init__, "." is the package itself.
    assert sorted(_imports("p.b", True, "from . import c\nfrom .. import a\n", modules)) == ["p.a", "p.b.c"]


def test_no_import_cycle() -> None:
    graph = import_graph()
    assert len(graph) > 100
    cycles = [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]
    described = []
    for component in cycles:
        cycle = next(iter(nx.simple_cycles(graph.subgraph(component))))
        described.append(" -> ".join([*cycle, cycle[0]]) + f"  (all of: {', '.join(component)})")
    assert not cycles, "import cycles:\n" + "\n".join(described)
