"""The package layout: no import circles, and llama.cpp imported by one module only."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

PACKAGES = {"specem_local": ROOT / "specem_local", "specem_tui": ROOT / "tui", "specem_research": ROOT / "research"}


def module_files() -> dict[str, Path]:
    modules = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = path.relative_to(folder).with_suffix("").parts
            name = ".".join((package, *parts)).removesuffix(".__init__")
            modules[name] = path
    return modules


def runtime_imports(path: Path, known: set[str]) -> set[str]:
    """The project modules ``path`` imports, at module level, inside functions or for type
    checking only (a circle through type hints is still a circle in the design)."""
    tree = ast.parse(path.read_text("utf-8"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        else:
            continue
        found |= {name for name in names if name in known}
    return found


def test_no_import_circles():
    modules = module_files()
    graph = {name: runtime_imports(path, set(modules)) - {name} for name, path in modules.items()}
    # A package's __init__ may re-export its modules; a module importing its own package is the
    # usual Python idiom, not a circle in the code's design.
    for name in graph:
        graph[name] = {target for target in graph[name] if not name.startswith(target + ".")}
    visiting, done, circles = [], set(), []

    def visit(name: str) -> None:
        if name in visiting:
            circles.append([*visiting[visiting.index(name) :], name])
            return
        if name in done:
            return
        visiting.append(name)
        for target in sorted(graph[name]):
            visit(target)
        visiting.pop()
        done.add(name)

    for name in sorted(graph):
        visit(name)
    assert circles == []


def test_only_the_backend_imports_llama_cpp():
    importers = [
        name
        for name, path in module_files().items()
        if any(
            isinstance(node, (ast.Import, ast.ImportFrom))
            and any(n == "llama_cpp" or n.startswith("llama_cpp.") for n in _imported(node))
            for node in ast.walk(ast.parse(path.read_text("utf-8")))
        )
    ]
    assert importers == ["specem_local.backend.library"]  # the backend package loads it there, once


def _imported(node: ast.Import | ast.ImportFrom) -> list[str]:
    return [alias.name for alias in node.names] if isinstance(node, ast.Import) else [node.module or ""]
