"""The core's import rules: no cycles, and the orchestration layer's packages never imported.

Dependencies point one way, flows -> tasks -> speedbench: the core (``src/speedbench``)
imports neither Prefect nor MLflow nor the project's ``tasks``/``flows`` packages, so it runs
and is tested without them. And no two of its modules need each other: an import inside a
function hides a cycle from Python but not from a reader. Every ``import`` and ``from ...
import`` in a module counts (except those under ``if TYPE_CHECKING:``), and ``from package
import name`` counts as importing the submodule ``package.name`` when that is a module. Prints
each cycle and each forbidden import, and exits 1 if there is one.

    python scripts/import_cycles.py [SRC_ROOT]
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = "speedbench"
# Top-level packages the core must not import: the orchestration layer and its libraries.
FORBIDDEN = ("prefect", "mlflow", "tasks", "flows")


def module_names(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package under ``root``."""
    out = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that module ``name`` imports, anywhere in its body."""
    return {m for m in imported_names(name, path) if m in modules and m != name}


def imported_names(name: str, path: Path) -> set[str]:
    """Every dotted name module ``name`` imports (and ``base.name`` of a ``from`` import)."""
    tree = ast.parse(path.read_text(), str(path))
    found: set[str] = set()
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node):
            skip.update(id(n) for child in node.body for n in ast.walk(child))
    is_package = path.name == "__init__.py"
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)
    return found


def forbidden_imports(root: Path) -> list[tuple[str, str]]:
    """(module, what it imports) for every import of a :data:`FORBIDDEN` package in the core."""
    return [
        (name, imported)
        for name, path in module_names(root).items()
        for imported in sorted(imported_names(name, path))
        if imported.split(".")[0] in FORBIDDEN
    ]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

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
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports.

    A package's ``__init__`` importing its own submodules (to register them) is how the
    registries fill, and a submodule is imported only after its parent package; an edge from a
    submodule back to an ancestor package is therefore not a cycle of their own making and is
    left out.
    """
    modules = module_names(root)
    graph = {}
    for name, path in modules.items():
        graph[name] = {m for m in imports_of(name, path, modules) if not name.startswith(m + ".")}
    return graph


def main() -> int:
    """Print the cycles; exit 1 if any."""
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "src"
    found = cycles(import_graph(root))
    for component in found:
        print("import cycle: " + " <-> ".join(component))
    forbidden = forbidden_imports(root)
    for module, imported in forbidden:
        print(f"{module} imports {imported}: the core never imports {', '.join(FORBIDDEN)}")
    if not found and not forbidden:
        print(f"no import cycles in {root / PACKAGE}, and no import of {', '.join(FORBIDDEN)}")
    return 1 if found or forbidden else 0


if __name__ == "__main__":
    sys.exit(main())
