"""The one dependency rule of DESIGN.md section 2, checked on the source (not by importing).

planner is pure (no torch, no simpy, and it knows nothing of sim or real); designs sits
on planner alone (pure too, below sim and real, which build designs from it); sim and real
never import each other. Inside real, the parts by side (DESIGN 2): the worker side and
the control side never import each other, both may import protocol, state and models,
launch may import everything, and the parts form no cycle (an import graph over the AST).
Across the whole project no module imports itself back, not even through a lazy import.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

FORBIDDEN = {
    "planner": {"torch", "simpy", "sim", "real", "experiments", "designs"},
    "designs": {"torch", "simpy", "sim", "real", "experiments", "traces", "pandas"},
    "sim": {"real", "torch"},
    "real": {"sim", "simpy"},
    "traces": {"torch", "simpy", "sim", "real", "designs"},
}


def imported_top_levels(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_respects_dependency_rule(package: str) -> None:
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"package {package} has no modules"
    offences = []
    for path in files:
        bad = imported_top_levels(path) & FORBIDDEN[package]
        if bad:
            offences.append(f"{path.relative_to(ROOT)} imports {sorted(bad)}")
    assert not offences, "\n".join(offences)


def test_checker_sees_forbidden_imports(tmp_path: Path) -> None:
    """The checker itself must notice both import forms, or the rule test proves nothing."""
    sample = tmp_path / "m.py"
    sample.write_text("import torch.distributed as dist\nfrom simpy import Environment\n")
    assert imported_top_levels(sample) == {"torch", "simpy"}


# -- inside real: the sides ---------------------------------------------------------------
REAL = ROOT / "real"
# which parts of real each part may import ("config" is the module real/config.py)
REAL_ALLOWED = {
    "config": set(),
    "protocol": {"config"},
    "state": {"config", "protocol"},
    "models": {"config"},
    "worker": {"config", "protocol", "state", "models"},
    "control": {"config", "protocol", "state", "models"},
    "launch": {"config", "protocol", "state", "models", "worker", "control"},
}


def real_part(path: Path) -> str:
    """'protocol' for real/protocol/keys.py, 'config' for real/config.py."""
    rel = path.relative_to(REAL)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def real_imports(path: Path) -> set[str]:
    """Dotted modules of real that `path` imports (absolute or relative), resolved."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = ["real", *path.relative_to(REAL).parent.parts]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "real")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module.split(".")[0] != "real":
                continue
            if node.module is None or module.count(".") == 1:  # `from . import x`, `from .. import protocol`
                found.update(f"{module}.{a.name}" for a in node.names)
            found.add(module)
    return found


def part_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def real_part_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in sorted(REAL.rglob("*.py")):
        if path.name == "__init__.py" and path.parent == REAL:
            continue
        mine = real_part(path)
        deps = graph.setdefault(mine, set())
        deps.update(p for p in map(part_of, real_imports(path)) if p and p != mine)
    return graph


def test_every_part_of_real_is_known() -> None:
    assert set(real_part_graph()) == set(REAL_ALLOWED), "a new part of real needs its row in REAL_ALLOWED"


@pytest.mark.parametrize("part", sorted(REAL_ALLOWED))
def test_real_part_imports_only_what_it_may(part: str) -> None:
    offences = []
    for path in sorted(REAL.rglob("*.py")):
        if path.parent == REAL and path.name == "__init__.py" or real_part(path) != part:
            continue
        for module in sorted(real_imports(path)):
            other = part_of(module)
            if other and other != part and other not in REAL_ALLOWED[part]:
                offences.append(f"{path.relative_to(ROOT)} imports {module}")
    assert not offences, "\n".join(offences)


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` as a path (first node repeated at the end), or None."""
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_no_import_cycles_between_parts_of_real() -> None:
    assert find_cycle(real_part_graph()) is None


def test_rule_checker_resolves_relative_imports_and_finds_cycles(tmp_path: Path) -> None:
    """Guards: the checks above must see a relative import across parts, and a cycle."""
    global REAL
    fake = tmp_path / "real"
    (fake / "worker").mkdir(parents=True)
    (fake / "control").mkdir()
    (fake / "worker" / "a.py").write_text("from ..control import coordinator\nfrom .b import x\n")
    (fake / "control" / "coordinator.py").write_text("from ..worker.a import y\n")
    saved, REAL = REAL, fake
    try:
        assert real_imports(fake / "worker" / "a.py") == {"real.control", "real.control.coordinator", "real.worker.b"}
        assert real_part_graph() == {"worker": {"control"}, "control": {"worker"}}
        assert find_cycle(real_part_graph()) == ["control", "worker", "control"]
    finally:
        REAL = saved


# -- no module imports itself back, in any package ---------------------------------------------
PACKAGES = ("planner", "designs", "sim", "real", "traces", "experiments", "ooblab")


def module_graph(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    """Module -> the project's modules it imports, at any depth of the file (a function's
    lazy import too: it still makes the two modules need each other). `from . import x`
    names the submodule x, not its package."""
    files: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                    base = ".".join(up + ([node.module] if node.module else []))
                subs = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in files]
                targets = subs if subs and not node.module else [base, *subs]
            else:
                continue
            graph[name].update(t for t in targets if t in files and t != name)
    return graph


def test_no_import_cycle_between_modules() -> None:
    assert find_cycle(module_graph(ROOT)) is None


def test_module_graph_sees_lazy_and_relative_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "sim"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from . import a\n")
    (pkg / "a.py").write_text("def f():\n    from .b import g\n")
    (pkg / "b.py").write_text("from sim.a import f\n")
    graph = module_graph(tmp_path, ("sim",))
    assert graph == {"sim": {"sim.a"}, "sim.a": {"sim.b"}, "sim.b": {"sim.a"}}
    assert find_cycle(graph) == ["sim.a", "sim.b", "sim.a"]


def test_each_built_in_design_is_one_package_and_planner_keeps_none():
    """A reader changing one design opens one folder: `designs/<name>/` holds its record,
    options, policy and helpers; `planner/policies/` keeps only the vocabulary the designs
    and the engines share, no module named after a design."""
    from designs.registry import BUILTIN, all_designs

    for module in BUILTIN:
        folder = ROOT / Path(*module.split("."))
        assert (folder / "__init__.py").is_file(), f"{module} is not a package"
    names = {d.name for d in all_designs()} | {m.rsplit(".", 1)[-1] for m in BUILTIN}
    left = sorted(p.name for p in (ROOT / "planner" / "policies").glob("*.py") if any(n in p.stem for n in names))
    assert not left, f"planner/policies holds design modules: {left}"


@pytest.mark.parametrize("folder", ["sim", "real/launch"])
def test_no_room_too_long_to_read(folder: str) -> None:
    """The simulator's and the launcher's modules stay under 500 lines each: a longer one is
    split where a reader would look for one of its jobs."""
    long = {p.name: n for p in (ROOT / folder).glob("*.py") if (n := len(p.read_text().splitlines())) > 500}
    assert not long, f"{folder}: {long}"


def design_modules_imported(path: Path) -> set[str]:
    """The modules under `designs.` that `path` imports, `from designs import x` counted as
    `designs.x` when x is a module."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("designs."))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.startswith("designs."):
                found.add(node.module)
            elif node.module == "designs":
                found.update(f"designs.{a.name}" for a in node.names if (ROOT / "designs" / a.name).exists())
    return found


# the part of `designs` the engines may import: the record, the registry, options, the CLI
DESIGNS_FRONT = {"designs.base", "designs.registry", "designs.options", "designs.cli"}


@pytest.mark.parametrize("package", ["sim", "real"])
def test_engines_reach_designs_through_the_registry(package: str) -> None:
    """sim and real know a design by its record in the registry, never by importing its
    package: a plan they time, place or checkpoint is the planner's vocabulary
    (`ExecutionPlan`, `planner.policies.grid.GridPlan`) or says what it needs itself."""
    offences = []
    for path in sorted((ROOT / package).rglob("*.py")):
        inner = {
            m for m in design_modules_imported(path) if not any(m == f or m.startswith(f + ".") for f in DESIGNS_FRONT)
        }
        if inner:
            offences.append(f"{path.relative_to(ROOT)} imports {sorted(inner)}")
    assert not offences, "\n".join(offences)


def test_the_designs_import_checker_sees_both_forms(tmp_path: Path) -> None:
    sample = tmp_path / "m.py"
    sample.write_text("from designs.varuna.policy import X\nimport designs.bamboo.cost\nfrom designs import gemini\n")
    assert design_modules_imported(sample) == {"designs.varuna.policy", "designs.bamboo.cost", "designs.gemini"}
