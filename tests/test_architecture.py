"""The arrows between packages (ARCHITECTURE.md), read from the source.

Every import of every module (module level and inside functions, read with ``ast``) is
checked against the layering rules, and the import graph is checked for circles. A
wrong-way arrow that is known and waiting on another change is listed in
``KNOWN_EXCEPTIONS`` with the reason; any other one fails, and so does an exception
that no longer happens (so the list only shrinks).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("scaffolds", "server", "clients", "training")
CHECKED = (*PRODUCT, "testing", "benchmarks", "experiments")
CLI_ENTRY = "clients.cli"
"""The ``ponder`` command's module: the one place allowed to reach server and training,
inside its subcommands' functions (so ``ponder eval`` never imports FastAPI)."""

FORBIDDEN: dict[str, frozenset[str]] = {
    "scaffolds": frozenset(
        {"server", "clients", "training", "testing", "tests", "benchmarks", "experiments"}
    ),
    "server": frozenset({"clients", "training", "testing", "tests", "benchmarks", "experiments"}),
    "training": frozenset({"server", "clients", "testing", "tests", "benchmarks", "experiments"}),
    "clients": frozenset({"server", "training", "testing", "tests", "benchmarks", "experiments"}),
    "testing": frozenset({"clients", "training", "tests", "benchmarks", "experiments"}),
    "benchmarks": frozenset({"tests", "experiments"}),
    "experiments": frozenset({"tests", "benchmarks"}),
    "tests": frozenset({"experiments"}),
}
"""Package -> the top-level packages it must not import."""

KNOWN_EXCEPTIONS: dict[tuple[str, str], str] = {}
"""(importing module, imported module) -> why it is allowed for now."""


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    line: int
    in_function: bool
    type_only: bool


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_files(packages: tuple[str, ...] = CHECKED) -> Iterator[Path]:
    for package in packages:
        yield from sorted((ROOT / package).rglob("*.py"))


ALL_MODULES = {module_name(p) for p in source_files((*CHECKED, "tests"))}


def _resolve(importer: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(path: Path) -> list[Import]:
    """Every import in ``path``: where it is, and what module it names (``from a import
    b`` names ``a.b`` when that is a module of ours, else ``a``)."""
    importer = module_name(path)
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[Import] = []

    def visit(node: ast.AST, in_function: bool, type_only: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                for alias in child.names:
                    found.append(Import(importer, alias.name, child.lineno, in_function, type_only))
            elif isinstance(child, ast.ImportFrom):
                base = _resolve(importer, path.name == "__init__.py", child)
                for alias in child.names:
                    full = f"{base}.{alias.name}"
                    target = full if full in ALL_MODULES else base
                    found.append(Import(importer, target, child.lineno, in_function, type_only))
            else:
                function = isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
                checking = isinstance(child, ast.If) and _is_type_checking(child)
                visit(child, in_function or function, type_only or checking)

    visit(tree, False, False)
    return found


ALL_IMPORTS = [i for path in source_files((*CHECKED, "tests")) for i in imports_of(path)]


def _top(module: str) -> str:
    return module.split(".")[0]


def wrong_way(imp: Import) -> bool:
    importer, imported = _top(imp.importer), _top(imp.imported)
    if imported not in FORBIDDEN.get(importer, frozenset()):
        return False
    lazy_cli = imp.importer == CLI_ENTRY and imp.in_function
    return not (lazy_cli and imported in ("server", "training"))


def test_the_rules_see_the_packages_and_their_imports() -> None:
    assert {_top(m) for m in ALL_MODULES} >= {*CHECKED, "tests"}
    lazy = [i for i in ALL_IMPORTS if i.importer == "scaffolds" and i.in_function]
    assert any(i.imported == "scaffolds.spec.build" for i in lazy), (
        "function-level imports are read"
    )


def test_no_import_points_the_wrong_way() -> None:
    wrong = [i for i in ALL_IMPORTS if wrong_way(i)]
    new = [
        f"{i.importer} (line {i.line}) imports {i.imported}"
        + (" inside a function" if i.in_function else "")
        for i in wrong
        if (i.importer, i.imported) not in KNOWN_EXCEPTIONS
    ]
    assert not new, "wrong-way imports (see ARCHITECTURE.md):\n" + "\n".join(new)
    stale = set(KNOWN_EXCEPTIONS) - {(i.importer, i.imported) for i in wrong}
    assert not stale, f"known exceptions that no longer happen; drop them: {sorted(stale)}"


def _study(module: str) -> str:
    return ".".join(module.split(".")[:2])


def test_experiments_import_no_other_experiment() -> None:
    """Each study stands alone: ``experiments.a`` never imports ``experiments.b``."""
    found = [
        f"{i.importer} (line {i.line}) imports {i.imported}"
        for i in ALL_IMPORTS
        if _top(i.importer) == _top(i.imported) == "experiments"
        and i.imported != "experiments"
        and _study(i.importer) != _study(i.imported)
    ]
    assert not found, "\n".join(found)


KERNEL_MAY_IMPORT = (
    "scaffolds.core",
    "scaffolds.engines.protocol",
    "scaffolds.prompts",
    "scaffolds.problem",
    "scaffolds.fanout",
    "scaffolds.errors",
)
"""What the run kernel builds on inside ``scaffolds``: itself, the engine protocol (never
an engine implementation), prompt sets, the shared modules below it (the problem and its
budget, fan-out, the exception hierarchy), and final-answer extraction below."""

KERNEL_EXCEPTIONS: dict[tuple[str, str], str] = {}
"""Kernel imports waiting on another change, with the reason (the list only shrinks)."""


def test_the_run_kernel_sees_engines_only_through_their_protocol() -> None:
    outside = [
        i
        for i in ALL_IMPORTS
        if i.importer.startswith("scaffolds.core")
        and _top(i.imported) == "scaffolds"
        and not i.type_only
        and not i.imported.startswith(KERNEL_MAY_IMPORT)
        and i.imported != "scaffolds.evaluation.answers"
    ]
    found = [
        f"{i.importer} (line {i.line}) imports {i.imported}"
        for i in outside
        if (i.importer, i.imported) not in KERNEL_EXCEPTIONS
    ]
    assert not found, "\n".join(found)
    stale = set(KERNEL_EXCEPTIONS) - {(i.importer, i.imported) for i in outside}
    assert not stale, f"kernel exceptions that no longer happen; drop them: {sorted(stale)}"


def test_nothing_imports_the_tests() -> None:
    found = [
        f"{i.importer} (line {i.line}) imports {i.imported}"
        for i in ALL_IMPORTS
        if _top(i.imported) == "tests" and _top(i.importer) != "tests"
    ]
    assert not found, "\n".join(found)


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in edges.get(node, ()):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            connect(node)
    return out


def test_circles_are_found() -> None:
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.parametrize("packages", [PRODUCT, ("testing",), ("benchmarks",)])
def test_no_import_circle_between_modules(packages: tuple[str, ...]) -> None:
    """Imports that run (type-only ones aside), function-level ones included: a lazy
    import that closes a circle hides it rather than removing it."""
    edges: dict[str, set[str]] = {}
    for imp in ALL_IMPORTS:
        if imp.type_only or imp.imported not in ALL_MODULES or imp.importer == imp.imported:
            continue
        if _top(imp.importer) in packages:
            edges.setdefault(imp.importer, set()).add(imp.imported)
    circles = _circles(edges)
    assert not circles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in circles)


SUBPACKAGE_EXCEPTIONS: dict[tuple[str, str], str] = {}
"""(importing subpackage, imported subpackage) -> why that arrow may close a circle for now
(the list only shrinks)."""


def _subpackage(module: str) -> str:
    """The node a module belongs to: ``scaffolds.core.run`` -> ``scaffolds.core``; a
    top-level module (``scaffolds.terminal``) and the package itself are their own; each
    API folder of the server (``server.api.<name>``) is its own.

    >>> _subpackage("scaffolds.core.run"), _subpackage("server.api.messages.serving")
    ('scaffolds.core', 'server.api.messages')
    >>> _subpackage("server.errors")
    'server.errors'
    """
    parts = module.split(".")
    return ".".join(parts[:3] if parts[:2] == ["server", "api"] and len(parts) > 2 else parts[:2])


def subpackage_edges(package: str) -> dict[str, set[str]]:
    """Run-time imports (function-level ones included) between the subpackages of
    ``package``."""
    edges: dict[str, set[str]] = {}
    for imp in ALL_IMPORTS:
        if imp.type_only or imp.imported not in ALL_MODULES:
            continue
        if _top(imp.importer) != package or _top(imp.imported) != package:
            continue
        importer, imported = _subpackage(imp.importer), _subpackage(imp.imported)
        if importer != imported:
            edges.setdefault(importer, set()).add(imported)
    return edges


@pytest.mark.parametrize("package", ["scaffolds", "server"])
def test_no_circle_between_subpackages(package: str) -> None:
    """Arrows between subpackages point one way: no subpackage reaches back to one that
    imports it, even through others (ARCHITECTURE.md, Arrows)."""
    edges = subpackage_edges(package)
    assert edges, f"the subpackages of {package} and their imports are read"
    arrows = {(a, b) for a, bs in edges.items() for b in bs}
    listed = {(a, b) for a, b in SUBPACKAGE_EXCEPTIONS if _top(a) == package}
    kept = {a: {b for b in bs if (a, b) not in listed} for a, bs in edges.items()}
    circles = _circles(kept)
    assert not circles, "subpackage circles:\n" + "\n".join(" <-> ".join(c) for c in circles)
    stale = listed - arrows
    assert not stale, f"subpackage exceptions that no longer happen; drop them: {sorted(stale)}"


SERVER_LAYERS: tuple[tuple[str, ...], ...] = (
    ("server.cli",),
    ("server.app",),
    ("server.api",),
    ("server.routing",),
    ("server.runs",),
    ("server.pool", "server.store"),
    ("server.telemetry", "server.settings"),
    ("server.model_settings", "server.errors", "server.keys"),
)
"""The subpackages of ``server``, top layer first: an import points to a lower layer.
Each API folder, ``server.api.<name>``, is its own subpackage on the ``server.api`` layer
(so no API imports another); a top-level module (``server.errors``) is its own."""

SERVER_LAYER_EXCEPTIONS: dict[tuple[str, str], str] = {}
"""(importing subpackage, imported subpackage) -> why that arrow points sideways or up for
now (the list only shrinks)."""


def _server_layer(subpackage: str) -> int:
    layer = "server.api" if subpackage.startswith("server.api.") else subpackage
    return next(i for i, names in enumerate(SERVER_LAYERS) if layer in names)


def _server_arrows() -> dict[tuple[str, str], list[Import]]:
    """The run-time imports (type-only ones aside, function-level ones included) between
    two subpackages of ``server``, by (importer, imported) subpackage."""
    arrows: dict[tuple[str, str], list[Import]] = {}
    for imp in ALL_IMPORTS:
        if imp.type_only or imp.imported not in ALL_MODULES:
            continue
        if not (imp.importer.startswith("server.") and imp.imported.startswith("server.")):
            continue
        pair = (_subpackage(imp.importer), _subpackage(imp.imported))
        if pair[0] != pair[1]:
            arrows.setdefault(pair, []).append(imp)
    return arrows


def test_every_server_subpackage_has_a_layer() -> None:
    subpackages = {_subpackage(m) for m in ALL_MODULES if m.startswith("server.")}
    placed = {name for names in SERVER_LAYERS for name in names}
    unplaced = {s for s in subpackages if s not in placed and not s.startswith("server.api.")}
    assert not unplaced, f"place these in SERVER_LAYERS: {sorted(unplaced)}"
    assert ("server.api.chat_completions", "server.runs") in _server_arrows(), (
        "the arrows between server's subpackages are read"
    )


def test_server_subpackages_point_down() -> None:
    """Every arrow between the subpackages of ``server`` points to a lower layer of
    :data:`SERVER_LAYERS` (or is listed in :data:`SERVER_LAYER_EXCEPTIONS`); with
    :func:`test_no_circle_between_subpackages`, which finds none between them."""
    arrows = _server_arrows()
    upward = {pair for pair in arrows if _server_layer(pair[1]) <= _server_layer(pair[0])}
    new = [
        f"{a} -> {b}: "
        + ", ".join(f"{i.importer} (line {i.line}) imports {i.imported}" for i in arrows[a, b])
        for a, b in sorted(upward - set(SERVER_LAYER_EXCEPTIONS))
    ]
    assert not new, "arrows that do not point down (see SERVER_LAYERS):\n" + "\n".join(new)
    stale = set(SERVER_LAYER_EXCEPTIONS) - upward
    assert not stale, f"layer exceptions that no longer happen; drop them: {sorted(stale)}"


def _python_files() -> Iterator[Path]:
    skip = {".venv", ".git", ".cache", "node_modules"}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT).parts
        if not any(part in skip or part.startswith(".venv") for part in parts):
            yield path


def test_the_formatter_formats_everything() -> None:
    """No code is kept from ruff format by a skip comment (the brief: let the formatter
    format). The marker is built here so that this file does not hold it."""
    marker = "# fmt: " + "skip"
    held = [
        str(path.relative_to(ROOT))
        for path in _python_files()
        if marker in path.read_text(encoding="utf-8")
    ]
    assert not held, held
