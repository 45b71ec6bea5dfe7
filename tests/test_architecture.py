"""Specification of the package layout (docs/ARCHITECTURE.md): imports run one way, down the
pipeline, and no module imports itself back through a cycle."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "tfm"

# Floors, lowest first: a module may import its own floor and those below, never one above.
FLOORS = [
    {"tfm", "tfm.errors", "tfm.special_tokens", "tfm.layout", "tfm.atomic", "tfm.config",
     "tfm.device", "tfm.plotting", "tfm.extras", "tfm.allocator", "tfm.collector", "tfm.integrity",
     "tfm.lock"},
    {"tfm.data", "tfm.model_info"},
    {"tfm.model"},
    {"tfm.checkpoint"},
    {"tfm.interop"},
    {"tfm.decoding"},
    {"tfm.documents"},
    {"tfm.training"},
    {"tfm.serve"},
    {"tfm.cli", "tfm.__main__"},
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def floor(module: str) -> int:
    for level, names in enumerate(FLOORS):
        if any(module == n or (n != "tfm" and module.startswith(n + ".")) for n in names):
            return level
    raise AssertionError(f"{module} belongs to no floor: add it to FLOORS and ARCHITECTURE.md")


def tfm_imports(path: Path) -> set[str]:
    """Every tfm module ``path`` imports, at the top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] == "tfm":
                found.add(node.module)
                # ``from tfm.cli import data`` imports the module tfm.cli.data
                for alias in node.names:
                    if (PACKAGE.parent / node.module.replace(".", "/") / f"{alias.name}.py"
                            ).exists():
                        found.add(f"{node.module}.{alias.name}")
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "tfm")
    return found


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_run_down_the_pipeline(module: str) -> None:
    upward = [m for m in tfm_imports(MODULES[module]) if floor(m) > floor(module)]
    assert not upward, f"{module} (floor {floor(module)}) imports from above: {upward}"


def test_no_module_imports_itself_through_a_cycle() -> None:
    graph = {m: {i for i in tfm_imports(p) if i in MODULES and i != m}
             for m, p in MODULES.items()}
    # A package's __init__ importing its own modules (the CLI registering its commands) is
    # not a cycle of code: only edges between distinct non-package modules count.
    graph = {m: {i for i in deps if not m.startswith(i + ".") and not i.startswith(m + ".")}
             for m, deps in graph.items()}
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        path.append(m)
        for n in graph[m]:
            if state.get(n) == 1:
                cycle = path[path.index(n):] + [n]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if n not in state:
                visit(n)
        path.pop()
        state[m] = 2

    for m in graph:
        if m not in state:
            visit(m)


# The most lines a function of each package may have (its nested functions included); the
# command line's, which are mostly option declarations, may be longer. "tfm": the ground
# floor's modules (tfm/*.py), the packages below have their own entries.
LONGEST = {"tfm": 60, "tfm/data": 60, "tfm/model": 60, "tfm/interop": 60, "tfm/decoding": 60,
           "tfm/training": 60, "tfm/serve": 60, "tfm/cli": 80}


@pytest.mark.parametrize("package", sorted(LONGEST))
def test_no_function_is_too_long(package: str) -> None:
    """A function longer than a screen is several jobs: name them (docs/ARCHITECTURE.md)."""
    long = []
    folder = PACKAGE.parent / package
    paths = folder.glob("*.py") if package == "tfm" else folder.rglob("*.py")
    for path in sorted(paths):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            function = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            if function and node.end_lineno - node.lineno + 1 > LONGEST[package]:
                long.append(f"{path.name}:{node.lineno} {node.name}")
    assert not long, long


# Each piece of metadata has one owner module, which everything imports it from.
OWNERS = {"ModelInfo": "tfm.model_info", "read_model_info": "tfm.model_info",
          "PrepareInfo": "tfm.data.dataset", "read_prepare_info": "tfm.data.dataset"}


def test_model_and_dataset_metadata_are_imported_from_their_owner_only() -> None:
    """config.json has one reader (tfm.model_info.read_model_info), prepare.json one
    (tfm.data.dataset.read_prepare_info): nothing imports them, or their types, by way of
    another module."""
    root = PACKAGE.parent
    stray = []
    for path in sorted([*PACKAGE.rglob("*.py"), *(root / "tests").glob("*.py"),
                        *(root / "bench").glob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                stray += [f"{path.relative_to(root)}: {a.name} from {node.module}"
                          for a in node.names
                          if a.name in OWNERS and OWNERS[a.name] != node.module]
    assert not stray, stray


def test_bench_scripts_import_their_helpers_one_way() -> None:
    """bench/'s scripts run as ``python bench/NAME.py`` (bench/ first on sys.path) and import
    its helpers by module name; none puts bench/ on sys.path itself (bench/harness.py)."""
    bench = PACKAGE.parent / "bench"
    adds_bench = re.compile(r"sys\.path\.insert\(0, str\((?:Path\(__file__\)\.resolve\(\)\.parent"
                            r"|\w+ / \"bench\")\)\)")
    stray = [p.name for p in sorted(bench.glob("*.py"))
             if adds_bench.search(p.read_text(encoding="utf-8"))]
    assert not stray, stray
