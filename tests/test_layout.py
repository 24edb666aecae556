"""The package's layout holds: folders import only what their docstrings allow, no import cycle (imports inside
functions counted), no module over 400 lines of code nor a function over 60 (docstrings and comments aside), and
``import torchrl_mask`` loads neither the CLI nor the benchmark."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "torchrl_mask"
MODULES = {
    ".".join(("torchrl_mask", *path.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(".__init__"): path
    for path in PACKAGE.rglob("*.py")
}
# What each part of the package may import from the package (as each folder's __init__ docstring says). The
# top-level modules: __init__ re-exports lazily, _compat and distributions import nothing of the package, __main__
# hands `bench` to the benchmark and every other command to the app.
ALLOWED = {
    "rollout": {"rollout"},
    "distributions": set(),
    "_compat": set(),
    "fastpath": {"fastpath", "rollout", "distributions"},
    "torchrl": {"torchrl", "fastpath", "rollout", "distributions"},
    "algorithms": {"algorithms", "torchrl", "fastpath", "rollout", "distributions"},
    "games": {"games", "algorithms", "torchrl", "fastpath", "rollout", "distributions"},
    "scheduling": {"scheduling", "algorithms", "torchrl", "fastpath", "rollout", "distributions"},
    "app": {"app", "games", "scheduling", "algorithms", "torchrl", "fastpath", "rollout", "distributions", "_compat"},
    "bench": {"bench", "app", "games", "scheduling", "algorithms", "torchrl", "fastpath", "rollout", "distributions"},
    "__main__": {"app", "bench"},
}
MAX_MODULE_CODE_LINES = 400
MAX_FUNCTION_CODE_LINES = 60


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _docstring_lines(tree: ast.Module) -> set[int]:
    """The line numbers of every docstring (module, class and function) in ``tree``."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                lines.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return lines


def _code_lines(source: str, tree: ast.Module, start: int = 1, end: int | None = None) -> int:
    """Lines of code from line ``start`` to ``end`` (1-based, inclusive): blank lines, comments and docstrings aside."""
    docstrings = _docstring_lines(tree)
    lines = source.splitlines()
    return sum(
        1
        for number in range(start, (end or len(lines)) + 1)
        if number not in docstrings and lines[number - 1].strip() and not lines[number - 1].strip().startswith("#")
    )


def _imports(path: Path, module: str) -> Iterator[tuple[str, bool]]:
    """The package modules ``module`` imports, each with whether the import runs at module load (top level),
    leaving out imports under ``if TYPE_CHECKING:``."""
    tree = ast.parse(path.read_text())
    typing_only = {
        id(node)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
        for node in ast.walk(block)
    }
    top_level = {id(node) for node in tree.body}
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
        for name in names:
            if name.startswith("torchrl_mask") and name in MODULES and name != module:
                yield name, id(node) in top_level


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _part(m) != ""))
def test_each_module_imports_only_what_its_folder_may(module: str) -> None:
    part = _part(module)
    for imported, _ in _imports(MODULES[module], module):
        target = _part(imported)
        if target and target not in ALLOWED[part]:
            pytest.fail(f"{module} imports {imported}: torchrl_mask.{part} may import only {sorted(ALLOWED[part])}")


def test_no_import_cycle_between_modules_counting_imports_inside_functions() -> None:
    graph = {m: {i for i, _ in _imports(p, m)} for m, p in MODULES.items() if m != "torchrl_mask"}
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            pytest.fail("import cycle: " + " -> ".join([*path[path.index(module) :], module]))
        if module in done:
            return
        for imported in graph.get(module, ()):
            visit(imported, [*path, module])
        done.add(module)

    for module in graph:
        visit(module, [])


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_over_400_lines_of_code_and_no_function_over_60(module: str) -> None:
    # Code lines: a docstring or a comment never has to be cut to fit; a module past the bound holds two ideas.
    source = MODULES[module].read_text()
    tree = ast.parse(source)
    code = _code_lines(source, tree)
    assert code <= MAX_MODULE_CODE_LINES, f"{module} has {code} lines of code: split it by what its parts do"
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines = _code_lines(source, tree, node.body[0].lineno, node.end_lineno)
            assert lines <= MAX_FUNCTION_CODE_LINES, f"{module}.{node.name} has {lines} lines of code: split it"


def test_the_cycle_check_sees_an_import_inside_a_function(tmp_path: Path) -> None:
    # The check above walks every import node, top level or not: a loop closed inside a function is a loop.
    path = tmp_path / "spawn_guard.py"
    path.write_text("def f() -> None:\n    from torchrl_mask.torchrl.workers import shutdown\n")
    assert [(name, top) for name, top in _imports(path, "torchrl_mask.torchrl.spawn_guard")] == [
        ("torchrl_mask.torchrl.workers", False)
    ]


def test_import_torchrl_mask_loads_neither_the_command_nor_the_benchmark() -> None:
    code = (
        "import sys, torchrl_mask\n"
        "[getattr(torchrl_mask, name) for name in torchrl_mask.__all__]\n"
        "print(sorted(m for m in sys.modules if m.startswith(('torchrl_mask.app', 'torchrl_mask.bench'))))\n"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]", loaded


def test_how_it_works_walks_the_tree_as_it_is() -> None:
    # docs/how-it-works.md tells a newcomer where each part lives; every folder and module it names must exist,
    # and its tree must list every folder of the package.
    page = (PACKAGE.parent / "docs" / "how-it-works.md").read_text()
    walk = page.split("## Where each part lives")[1]
    tree = walk.split("```")[1]
    folders = {
        line.split()[0].rstrip("/")
        for line in tree.splitlines()[2:]
        if line.startswith("  ") and line.split()[0].endswith("/")
    }
    assert folders == {path.parent.name for path in PACKAGE.glob("*/__init__.py")}, folders
    named = set(re.findall(r"`([a-z_]+(?:/[a-z_]+)?\.py)`", walk))
    assert len(named) >= 10
    for path in named:
        assert (PACKAGE / path).is_file(), f"docs/how-it-works.md names torchrl_mask/{path}, which does not exist"
