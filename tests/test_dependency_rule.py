"""The one dependency rule of DESIGN.md section 2, checked on the source (not by importing).

planner is pure (no torch, no simpy, and it knows nothing of sim or real); sim and real
never import each other.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

FORBIDDEN = {
    "planner": {"torch", "simpy", "sim", "real", "experiments"},
    "sim": {"real", "torch"},
    "real": {"sim", "simpy"},
    "traces": {"torch", "simpy", "sim", "real"},
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
