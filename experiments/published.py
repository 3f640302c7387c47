"""Published results of large training runs beside ooblab's predictions of them.

One row per published figure: the setting as published (as near as ooblab can express it),
the prediction under the `h100-datacenter` cost profile (`sim.cost_builtins`), the error,
and whether the row passes its tolerance: effective training time within 3 points, or on
the stated side of a bound ("higher than 90%"); times and intervals within 25%. Each row
says whether its figure set a profile value (`calibration`: it can only check that the
simulator charges what the profile says), is predicted from the others (`validation`), or
checks the simulator's core against Kokolis et al.'s closed form for expected ETTR under
the `paper` costs with only the closed form's terms set (`sanity`: host failures at a fixed
rate, a fixed restart, a checkpoint every dt), at 1,024, 4,096 and 12,500 nodes.

The job throughout: GPT-3 175B (the largest model ooblab profiles; Llama 3 405B and the
others are larger) on nodes of 8 x H100 80 GB, a global batch of one sequence per GPU, planner
calibration, failures at Llama 3's rates (`datacenter:` traces, Table 5 of arXiv
2407.21783) and the checkpoint-restart design (Varuna) with Young's interval, which is how
the published jobs recover; ByteRobust's row runs GEMINI, whose copies in memory are
the nearest to its checkpoint in memory at every step; MegaScale's initialisation row runs
Oobleck, whose reconfiguration builds new communicators. Quick: the same rows on 2,048 GPUs for a day, to exercise the
code; only the full setting compares with the published numbers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from .base import Experiment, Setting
from .simrun import sim_spec
from .sweep import RunSpec
from .tracesrc import TraceChoice

if TYPE_CHECKING:
    from matplotlib.figure import Figure

NAME = "published"
COSTS = "h100-datacenter"
MODEL, GPU, GPUS_PER_NODE, BATCH_PER_GPU = "gpt3-175b", "h100-80gb", 8, 1
ETTR_POINTS, TIME_SHARE = 0.03, 0.25  # tolerances: ETTR points, relative error of times


@dataclass(frozen=True)
class Published:
    """One published figure and the run that predicts it."""

    key: str
    source: str  # paper, table or section
    what: str  # in words, with the setting
    # "ettr", "restart_s" (the restart after one loss), "reconfigure_s" (the reconfiguration
    # after one loss) or "mttf_h"
    measure: str
    value: float
    side: str  # "=": within the tolerance; ">": above the value (a published lower bound)
    role: str  # "calibration", "validation" or "sanity"
    gpus: int
    trace: str  # the trace spec; {gpus} filled in
    config: dict[str, Any] = field(default_factory=dict)
    duration_s: float | None = None
    design: str = "varuna"
    costs: str = COSTS


def _dc(days: float, seed: int, hosts_only_per_1000_node_days: float | None = None) -> str:
    """A `datacenter:` trace at Llama 3's rates, or (given a rate) with host failures only,
    each host failing at that many per 1,000 node-days (Kokolis et al.'s r_f)."""
    spec = f"datacenter:gpus={{gpus}},days={days:g},seed={seed}"
    if hosts_only_per_1000_node_days is None:
        return spec
    others = ",".join(f"{c}_mtbf=off" for c in ("gpu", "cable", "switch", "software"))
    return f"{spec},{others},host_mtbf={1000.0 / hosts_only_per_1000_node_days:.6g}d"


def closed_form_ettr(nodes: int, per_1000_node_days: float, restart_s: float, every_s: float, write_s: float) -> float:
    """Kokolis et al.'s expected ETTR, (1 - N r_f (u0 + dt/2)) / (1 + w/dt): N nodes failing
    at r_f each, a restart of u0, a checkpoint written in w every dt."""
    rate_per_s = nodes * per_1000_node_days / 1000.0 / 86400.0
    return (1.0 - rate_per_s * (restart_s + every_s / 2.0)) / (1.0 + write_s / every_s)


RSC1_PER_1000_NODE_DAYS = 6.50  # Kokolis et al.: RSC-1's failure rate
# the closed form's settings across N: (GPUs, days, restart u0, checkpoint every dt, write w),
# each with a host failure rate of 5 per 1,000 node-days (Kokolis et al.'s r_f ~ 5e-3)
CLOSED_FORM = ((8192, 14, 600.0, 3600.0, 30.0), (32768, 7, 300.0, 1800.0, 30.0), (100000, 2, 120.0, 600.0, 30.0))
CLOSED_FORM_RATE = 5.0


ROWS = (
    Published(
        "llama3-ett", "Llama 3, arXiv 2407.21783, section 3.3.4",
        "effective training time, 16,384 H100s for 54 days (419 unexpected interruptions)",
        "ettr", 0.90, ">", "validation", 16384, _dc(54, 1), {"checkpoint_adaptive": "young"},
    ),
    Published(
        "megascale-ett", "MegaScale, arXiv 2402.15627, section 6.3",
        "effective training time above 90% at more than 10,000 GPUs over several weeks",
        "ettr", 0.90, ">", "validation", 12288, _dc(21, 2), {"checkpoint_adaptive": "young"},
    ),
    Published(
        "kokolis-ettr-4k", "Kokolis et al., arXiv 2410.21680 (RSC-1)",
        "effective training time above 0.9 for 2,048-4,096-GPU jobs with hourly checkpoints "
        "(RSC-1's 6.50 failures per 1,000 node-days)",
        "ettr", 0.90, ">", "validation", 4096, _dc(14, 3, RSC1_PER_1000_NODE_DAYS), {"checkpoint_every_s": 3600.0},
    ),
    Published(
        "kokolis-ettr-5min", "Kokolis et al., arXiv 2410.21680 (RSC-1 what-if)",
        "the same jobs checkpointing every 5 minutes without blocking: expected ETTR 0.93",
        "ettr", 0.93, "=", "validation", 4096, _dc(14, 3, RSC1_PER_1000_NODE_DAYS),
        {"checkpoint_every_s": 300.0, "checkpoint_cost_factor": 0.0},  # writes that never block
    ),
    Published(
        "kokolis-mttf-1k", "Kokolis et al., arXiv 2410.21680, Fig. 7",
        "measured mean time to failure of 1,024-GPU jobs: 7.9 h",
        "mttf_h", 7.9, "=", "validation", 1024, _dc(54, 4), {"checkpoint_adaptive": "young"},
    ),
    *(
        Published(
            f"byterobust-restart-{gpus // 1024}k", "ByteRobust, arXiv 2509.16293, Table 7",
            f"a requeued restart at {gpus:,} GPUs: {value:g} s",
            "restart_s", value, "=", "calibration", gpus, "fixed:nodes={nodes},removals=1,interval=2h",
            {"checkpoint_adaptive": "young"}, 3 * 3600.0,
        )
        for gpus, value in ((2048, 454.0), (4096, 545.0), (8192, 635.0), (16384, 768.0))
    ),
    Published(
        "megascale-init-12k", "MegaScale, arXiv 2402.15627, section 3.5",
        "communicator initialisation under 30 s beyond 10,000 GPUs: Oobleck's reconfiguration after one loss "
        "at 12,288 GPUs (the profile's 30 s, plus the layers the survivors copy)",
        "reconfigure_s", 30.0, "=", "calibration", 12288, "fixed:nodes={nodes},removals=1,interval=2h",
        {}, 3 * 3600.0, design="oobleck",
    ),
    Published(
        "byterobust-ettr", "ByteRobust, arXiv 2509.16293, abstract and section 8.1.3",
        "effective training time up to 97% over three months on 9,600 Hopper GPUs, checkpointing in memory "
        "every step (GEMINI here: copies in peers' memory every iteration)",
        "ettr", 0.97, "=", "validation", 9600, _dc(90, 5), design="gemini",
    ),
    *(
        Published(
            f"closed-form-{gpus // 1000}k", "Kokolis et al., arXiv 2410.21680: the expected-ETTR closed form",
            f"{gpus // GPUS_PER_NODE:,} nodes, {CLOSED_FORM_RATE:g} host failures per 1,000 node-days, restart "
            f"{restart:g} s, a {write:g} s checkpoint every {every:g} s, nothing else charged",
            "ettr", closed_form_ettr(gpus // GPUS_PER_NODE, CLOSED_FORM_RATE, restart, every, write), "=", "sanity",
            gpus, _dc(days, 6, CLOSED_FORM_RATE),
            {"restart_overhead_s": restart, "checkpoint_every_s": every, "checkpoint_fixed_s": write},
            costs="paper",
        )
        for gpus, days, restart, every, write in CLOSED_FORM
    ),
)  # fmt: skip
QUICK_GPUS, QUICK_DAYS = 2048, 1.0
TIMES = ("restart_s", "reconfigure_s")  # one loss each: the quick setting keeps the 2,048-GPU rows


def _trace(row: Published, quick: bool) -> tuple[str, int]:
    gpus = QUICK_GPUS if quick else row.gpus
    spec = row.trace.format(gpus=gpus, nodes=gpus // GPUS_PER_NODE)
    if quick and spec.startswith("datacenter:"):
        spec = re.sub(r",seed=\d+", ",seed=0", re.sub(r",days=[^,]+", f",days={QUICK_DAYS:g}", spec))
    return spec, gpus


def specs(setting: Setting) -> list[RunSpec]:
    out = []
    for row in ROWS:
        if setting.quick and row.measure in TIMES and row.gpus != QUICK_GPUS:
            continue
        spec, gpus = _trace(row, setting.quick)
        extra: dict[str, Any] = {"duration_s": row.duration_s} if row.duration_s else {}
        out.append(
            sim_spec(
                NAME,
                TraceChoice(spec, row.key, True, row.key),
                policy=row.design,
                model=MODEL,
                calibration="planner",
                gpu=GPU,
                gpus_per_node=GPUS_PER_NODE,
                global_batch=BATCH_PER_GPU * gpus,
                costs=row.costs,
                labels={"row": row.key},
                **row.config,
                **extra,
            )
        )
    return out


def predicted(row: Published, run: pd.Series) -> float:
    """The run's figure for the row's measure."""
    if row.measure == "ettr":
        return float(run["effective_training_time"])
    if row.measure == "mttf_h":
        bursts_per_h = run["trace_removals_per_hour"] / max(run["trace_mean_burst"], 1.0)
        return float(1.0 / bursts_per_h) if bursts_per_h > 0 else float("inf")
    if row.measure == "reconfigure_s":
        return float(run["breakdown_reconfiguration_s"] / max(run["num_reconfigurations"], 1))
    # restart_s: the restart from the checkpoint after the loss; the restart time also holds
    # the first launch, which ends when training first starts (its nodes ready at start-up)
    from sim.cost_profiles import get

    first_launch = run["first_start_s"] - get(COSTS).costs["node_startup_s"].value
    return float(run["breakdown_restart_s"] - first_launch)


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """One row per published figure: published, predicted, error, and whether it passes."""
    rows = []
    by_key = {r.key: r for r in ROWS}
    for _, run in table.iterrows():
        row = by_key[run["row"]]
        value = predicted(row, run)
        if row.measure == "ettr":
            error = value - row.value
            ok = value > row.value if row.side == ">" else abs(error) <= ETTR_POINTS
        else:
            error = value / row.value - 1.0
            ok = abs(error) <= TIME_SHARE
        rows.append(
            {
                "row": row.key,
                "source": row.source,
                "role": row.role,
                "measure": row.measure,
                "published": ("> " if row.side == ">" else "") + f"{row.value:g}",
                "predicted": value,
                "error": error,
                "passes": bool(ok),
            }
        )
    order = {r.key: i for i, r in enumerate(ROWS)}
    return pd.DataFrame(rows).sort_values("row", key=lambda s: s.map(order)).reset_index(drop=True)


def figures(table: pd.DataFrame, out_dir: Path) -> dict[str, Figure]:
    import matplotlib.pyplot as plt

    frame = summary(table)
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(frame) + 1.2), layout="constrained")
    published = {row.key: row.value for row in ROWS}  # the figure, not the text summary() shows
    ratios = np.array([p / published[key] for p, key in zip(frame["predicted"], frame["row"])], dtype=float)
    y = np.arange(len(frame))[::-1]
    ax.axvline(1.0, color="0.5", lw=1)
    ax.scatter(ratios, y, c=["tab:green" if ok else "tab:red" for ok in frame["passes"]], zorder=3)
    ax.set_yticks(y, [f"{r} ({role})" for r, role in zip(frame["row"], frame["role"])])
    ax.set_xlabel(f"ooblab's prediction / the published figure ({COSTS} costs; green: within tolerance)")
    ax.grid(axis="x", alpha=0.3)
    return {"published": fig}


EXPERIMENT = Experiment(
    name=NAME,
    description="published results of large training runs (Llama 3, MegaScale, ByteRobust, Kokolis et al.) beside ooblab's predictions under the h100-datacenter costs",
    paper_figures=(),
    notebook="notebooks/published.py",
    specs=specs,
    figures=figures,
)
