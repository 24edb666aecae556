"""The package's layout holds: folders import only what their docstrings allow, no import cycle, no module over
400 lines, no function over 60 lines of code, and ``import torchrl_mask`` loads neither the CLI nor the benchmark."""

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
# top-level modules: __init__ re-exports lazily, _compat and distributions import nothing of the package.
ALLOWED = {
    "rollout": {"rollout"},
    "distributions": set(),
    "_compat": set(),
    "fastpath": {"fastpath", "rollout", "distributions"},
    "torchrl": {"torchrl", "fastpath", "rollout", "distributions"},
    "algorithms": {"algorithms", "torchrl", "fastpath", "rollout", "distributions"},
    "games": {"games", "algorithms", "torchrl", "fastpath", "rollout", "distributions"},
    "scheduling": {"scheduling", "algorithms", "torchrl", "fastpath", "rollout", "distributions"},
    "app": {"app", "games", "algorithms", "torchrl", "fastpath", "rollout", "distributions", "_compat"},
    "bench": {"bench", "app", "games", "scheduling", "algorithms", "torchrl", "fastpath", "rollout", "distributions"},
}
# The one import across the rule: `torchrl-mask bench` runs the harness, imported when that command runs.
EXCEPTIONS = {("torchrl_mask.app.cli", "bench")}


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


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


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _part(m) not in ("", "__main__")))
def test_each_module_imports_only_what_its_folder_may(module: str) -> None:
    part = _part(module)
    for imported, _ in _imports(MODULES[module], module):
        target = _part(imported)
        if target and target not in ALLOWED[part] and (module, target) not in EXCEPTIONS:
            pytest.fail(f"{module} imports {imported}: torchrl_mask.{part} may import only {sorted(ALLOWED[part])}")


def test_no_import_cycle_between_modules() -> None:
    graph = {m: {i for i, top in _imports(p, m) if top} for m, p in MODULES.items() if m != "torchrl_mask"}
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
def test_no_module_over_400_lines_and_no_function_over_60_lines_of_code(module: str) -> None:
    source = MODULES[module].read_text()
    lines = source.splitlines()
    assert len(lines) <= 400, f"{module} has {len(lines)} lines: split it by what its parts do"
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        body = node.body
        first = body[0]
        docstring = (
            isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str)
        )
        start = (first.end_lineno or first.lineno) if docstring else node.lineno
        code = [line for line in lines[start : node.end_lineno] if line.strip() and not line.strip().startswith("#")]
        assert len(code) <= 60, f"{module}.{node.name} has {len(code)} lines of code: split it"


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
