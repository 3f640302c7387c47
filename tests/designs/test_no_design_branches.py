"""No engine or experiment branches on a design's name: sim/, real/ and
experiments/ ask the design (`designs.registry`) for what differs, never compare with its name.

The check walks the source's AST for comparisons (==, !=, in, not in, is, match cases)
against a string literal, or a literal tuple/list/set holding one, that names a registered
design. A comparison inside a subscript (`table[table["system"] == "varuna"]`) is a table
row filter that picks which results a figure shows, not a branch of how a design runs: it is
allowed. Naming a design as data (an experiment's list of systems, a dict keyed by name) is
allowed too. A guard plants a branch and checks that the scan sees it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from designs import registry

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("sim", "real", "experiments")
# Replays the artifact's own three programs (and their state), one per system it shipped: the names
# it compares are the artifact's systems (`ArtifactHooks.system`), not a design's branch, and
# no other design can have an as-run replay.
EXEMPT = {"sim/artifact_replay.py", "sim/artifact_replay_state.py"}


def _names_in(node: ast.AST, names: set[str]) -> set[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return set().union(*(_names_in(e, names) for e in node.elts)) if node.elts else set()
    return set()


def design_branches(source: str, names: set[str], filename: str = "<source>") -> list[str]:
    """'line: text' for every comparison with a design name outside a subscript."""
    tree = ast.parse(source, filename=filename)
    inside_subscript: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript):
            inside_subscript.update(id(n) for n in ast.walk(node.slice))
    found = []
    for node in ast.walk(tree):
        hits: set[str] = set()
        if isinstance(node, ast.Compare) and id(node) not in inside_subscript:
            for side in (node.left, *node.comparators):
                hits |= _names_in(side, names)
        elif isinstance(node, ast.MatchValue):
            hits |= _names_in(node.value, names)
        if hits:
            found.append(f"{filename}:{getattr(node, 'lineno', '?')}: compares with {sorted(hits)}")
    return found


def test_no_engine_or_experiment_branches_on_a_design_name() -> None:
    names = set(registry.names())
    offences = []
    for package in SCANNED:
        for path in sorted((ROOT / package).rglob("*.py")):
            if str(path.relative_to(ROOT)) in EXEMPT:
                continue
            offences += design_branches(path.read_text(), names, str(path.relative_to(ROOT)))
    assert not offences, "ask the design instead:\n" + "\n".join(offences)


@pytest.mark.parametrize(
    "planted",
    [
        'if config.policy == "varuna":\n    pass\n',
        'restart = "bamboo" != system\n',
        'x = 1 if policy in ("oobleck", "other") else 2\n',
        'match policy:\n    case "oobleck":\n        pass\n',
        'while name is "varuna":\n    break\n',
    ],
)
def test_the_scan_sees_a_planted_branch(planted: str) -> None:
    assert design_branches(planted, set(registry.names())), planted


def test_the_scan_leaves_data_and_row_filters_alone() -> None:
    source = (
        'SYSTEMS = ("oobleck", "bamboo", "varuna")\n'
        'COLOURS = {"varuna": "#009E73"}\n'
        'rows = table[table["system"] != "varuna"]\n'
        'if kind == "datacenter":\n    pass\n'
    )
    assert design_branches(source, set(registry.names())) == []
