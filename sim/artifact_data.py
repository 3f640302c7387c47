"""The published artifact's calibration: throughput tables and per-model constants.

Source: the Oobleck SOSP'23 artifact's trace-replay simulators (SymbioticLab/Oobleck,
branch sosp23-artifact, commit 7966556, tools/simulator/{oobleck,bamboo,varuna}_simulator.py),
as summarised in `../shared/calibration/README.md`. The throughput table ships as
`sim/data/artifact-throughput.csv`; the constants below are the README's table. They are
the paper's inputs, carried as data with that citation.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .errors import SimError

DATA_CSV = Path(__file__).with_name("data") / "artifact-throughput.csv"

SYSTEMS = ("oobleck", "bamboo", "varuna")
NODE_STARTUP_S = 45.0  # a node is usable this long after its add event
MIN_NODES = 12  # the pipeline stage target: no training below it
TABLE_MIN_NODES, TABLE_MAX_NODES = 15, 30  # rows outside clamp to the nearest
SPOT_PRICE_PER_NODE_HOUR = 0.91  # p3.2xlarge spot, one V100
ON_DEMAND_PRICE_PER_NODE_HOUR = 3.06
BAMBOO_DEPTH = 12
BAMBOO_FAILOVER_SLOWDOWN = 1.5  # iteration time while a node covers two stages
BAMBOO_RESTART_S = 30.0  # a fatal failure: global rendezvous
BAMBOO_OVERLOAD_THRESHOLD = 0.05
VARUNA_CHECKPOINT_EVERY = 10  # iterations


@dataclass(frozen=True)
class ArtifactModel:
    """One model's constants. `varuna_restart_s` None: by node count (the csv column);
    Varuna's restart includes writing a checkpoint, so its pause is restart - checkpoint."""

    name: str
    global_batch: int
    oobleck_reconfigure_s: float
    bamboo_reconfigure_s: float
    varuna_restart_s: float | None
    varuna_checkpoint_s: float
    spot_no_rollback: bool  # the paper's spot-trace figures turn Varuna's rollback off


ARTIFACT_MODELS: dict[str, ArtifactModel] = {
    m.name: m
    for m in (
        ArtifactModel("BERT-large", 8192, 2.0, 76.0, None, 15.8, True),
        ArtifactModel("GPT-2-ours", 1024, 2.0, 80.0, 83.0, 11.5, True),
        ArtifactModel("GPT-3-medium", 819, 3.0, 100.0, 78.7, 11.2, True),
        ArtifactModel("GPT-3-2_7b", 512, 6.0, 230.0, 515.0, 50.0, False),
        ArtifactModel("GPT-3-6_7b", 1024, 10.0, 450.0, 701.0, 120.0, False),
    )
}


def get_model(name: str) -> ArtifactModel:
    try:
        return ARTIFACT_MODELS[name]
    except KeyError:
        raise SimError(
            f"unknown artifact model {name!r}; the artifact calibration has {', '.join(ARTIFACT_MODELS)}"
        ) from None


@dataclass(frozen=True)
class TableRow:
    samples_per_s: float
    idle_gpus: int
    varuna_restart_s: float | None


@lru_cache(maxsize=1)
def load_table() -> dict[tuple[str, str, int], TableRow]:
    """{(system, model, nodes): row} from the package's csv (checked for completeness)."""
    table: dict[tuple[str, str, int], TableRow] = {}
    with open(DATA_CSV, newline="") as handle:
        for line, record in enumerate(csv.DictReader(handle), start=2):
            try:
                key = (record["system"], record["model"], int(record["nodes"]))
                idle = record["idle_gpus"]
                restart = record["varuna_restart_s"]
                table[key] = TableRow(
                    float(record["samples_per_s"]),
                    int(float(idle)) if idle else 0,
                    float(restart) if restart else None,
                )
            except (KeyError, ValueError) as exc:
                raise SimError(f"{DATA_CSV}:{line}: malformed calibration row ({exc})") from None
    for system in SYSTEMS:
        for model in ARTIFACT_MODELS:
            for nodes in range(TABLE_MIN_NODES, TABLE_MAX_NODES + 1):
                if (system, model, nodes) not in table:
                    raise SimError(f"{DATA_CSV}: no row for {system}, {model}, {nodes} nodes")
    return table


def row(system: str, model: str, nodes: int) -> TableRow:
    """The table row for `nodes` live nodes (clamped to 15..30 as the artifact does)."""
    clamped = min(max(nodes, TABLE_MIN_NODES), TABLE_MAX_NODES)
    return load_table()[(system, get_model(model).name, clamped)]


def min_runnable_nodes(system: str, model: str) -> int | None:
    """The fewest live nodes at which the table gives the system any throughput (rows
    below 15 nodes use the 15 row); None when it never runs. Oobleck on GPT-3-6_7b has 0 at
    15 nodes: in the artifact no iteration ever completes there, so it needs 16."""
    for nodes in range(1, TABLE_MAX_NODES + 1):
        if row(system, model, nodes).samples_per_s > 0:
            return nodes
    return None


def runnable(system: str, model: str) -> bool:
    """False where the artifact gives the system no throughput (Bamboo on GPT-3: OOM)."""
    return any(row(system, model, n).samples_per_s > 0 for n in range(TABLE_MIN_NODES, TABLE_MAX_NODES + 1))
