"""The package layout (docs/development.md): each package imports only the layers below it, no
import circles, llama.cpp imported by one module only, and research through the faces."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

PACKAGES = {"specem_local": ROOT / "specem_local", "specem_tui": ROOT / "tui", "specem_research": ROOT / "research"}

# The top-level modules everything may use, and what each package may import beside them.
FOUNDATION = {"errors", "settings", "setting_fields", "dirs", "events", "text"}
MAY_IMPORT = {
    "models": set(),
    "labelled": set(),
    "storage": set(),
    "backend": {"models"},
    "mcp": set(),  # MCP servers' tools: the foundation and the mcp SDK only
    "engine": {"backend", "models", "storage", "labelled"},
    "server": {"engine", "backend", "models", "storage", "mcp"},
    # `specem eval` is a command
    "commands": {"server", "engine", "backend", "models", "storage", "labelled", "mcp", "specem_research"},
    "specem_tui": {"engine", "backend", "models", "storage", "mcp"},
}


def module_files() -> dict[str, Path]:
    modules = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = path.relative_to(folder).with_suffix("").parts
            name = ".".join((package, *parts)).removesuffix(".__init__")
            modules[name] = path
    return modules


def imports(path: Path, known: set[str]) -> set[str]:
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


def import_graph() -> dict[str, set[str]]:
    modules = module_files()
    return {name: imports(path, set(modules)) - {name} for name, path in modules.items()}


def layer(module: str) -> str:
    """``specem_local.engine.vote`` → ``engine``; a top-level module → its own name; the chat
    app and the research harness are layers of their own."""
    package, _, rest = module.partition(".")
    if package != "specem_local":
        return package
    return rest.split(".")[0] if rest else "specem_local"


def test_no_import_circles():
    graph = import_graph()
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


def test_each_package_imports_only_the_layers_below_it():
    wrong = []
    for module, targets in import_graph().items():
        source = layer(module)
        if source in ("specem_local", "specem_research", "__main__"):
            continue  # the public face, the harness (next test), ``python -m specem_local``
        allowed = FOUNDATION | {source} if source in FOUNDATION else FOUNDATION | {source} | MAY_IMPORT[source]
        wrong += [f"{module} imports {target}" for target in sorted(targets) if layer(target) not in allowed]
    assert wrong == []


def test_every_module_has_a_layer():
    assert set(MAY_IMPORT) | FOUNDATION | {"__main__", "data"} >= {
        layer(name) for name in module_files() if name.startswith("specem_local.")
    }, "a new package or top-level module needs its place in MAY_IMPORT (and docs/development.md)"


def test_research_imports_only_the_faces():
    """``specem_research`` is apart: it uses the public API, a package's face or a top-level
    module, never a module inside a package, so the packages can be rearranged under it."""
    faces = {"specem_local", *(f"specem_local.{name}" for name in (*MAY_IMPORT, *FOUNDATION))}
    deep = [
        f"{module} imports {target}"
        for module, targets in import_graph().items()
        if module.startswith("specem_research")
        for target in sorted(targets)
        if target.startswith("specem_local")
        and target not in faces
        and not any(target == f"{face}.{leaf}" for face in faces for leaf in _face_names(face))
    ]
    assert deep == []


def test_front_ends_import_the_engines_face():
    """The server, the commands and the chat app use the engine through its face
    (``specem_local/engine/__init__.py``), never a module inside it, so the engine can be
    rearranged under them (issue 54)."""
    front_ends = ("specem_local.server", "specem_local.commands", "specem_tui")
    face = _face_names("specem_local.engine")
    deep = [
        f"{module} imports {target}"
        for module, targets in import_graph().items()
        if module.startswith(front_ends)
        for target in sorted(targets)
        if target.startswith("specem_local.engine.") and target.removeprefix("specem_local.engine.") not in face
    ]
    assert deep == []


def _face_names(face: str) -> set[str]:
    """The names a package's face imports (``from specem_local.engine import feedback`` names
    the module ``feedback`` through the face)."""
    path = PACKAGES["specem_local"] / Path(*face.split(".")[1:]) / "__init__.py"
    if not path.exists():
        return set()
    tree = ast.parse(path.read_text("utf-8"))
    imported = (node for node in ast.walk(tree) if isinstance(node, ast.ImportFrom))
    return {alias.asname or alias.name for node in imported for alias in node.names}


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
