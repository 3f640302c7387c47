"""Planner figures: what the templates look like, what f costs, how long planning takes.

Three parts, one run each per model (or model and cluster size):
- `templates`: the optimal pipeline template for every node count from n0 to 30 on the
  paper's cluster (one V100 16 GB per node, 10 Gb/s, the artifact's global batches): the
  iteration time of one pipeline of that template running the whole batch, and the
  memory of its fullest GPU against the usable memory.
- `throughput`: the planner's best plan on 1..30 nodes for f = 0..3 (samples/s; missing
  where f + 1 replicas do not fit).
- `timing`: wall time of the templates plus the instantiation over the whole cluster, for
  GPT-3 350M ... 175B on 8 ... 64 nodes of 8 x A100 80 GB, f = 1 (the planner benchmark's
  setting). Runs one at a time (`processes=1`) so they do not disturb each other's clocks.
Each run writes `rows.csv`; the figures read them back.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from . import plots
from .base import Experiment, Setting
from .sweep import RunSpec

if TYPE_CHECKING:
    from matplotlib.figure import Figure

NAME = "planner"
KIND = "planner"
TEMPLATE_MODELS = (
    "bert-large",
    "gpt2-xl",
    "gpt3-350m",
    "gpt3-2.7b",
    "gpt3-6.7b",
)  # the artifact's five, as the planner calibration maps them
THROUGHPUT_MODELS = ("gpt2-xl", "gpt3-2.7b", "gpt3-6.7b")
TIMING_MODELS = ("gpt3-350m", "gpt3-1.3b", "gpt3-2.7b", "gpt3-6.7b", "gpt3-13b", "gpt3-175b")
TIMING_NODES = (8, 16, 32, 64)
GLOBAL_BATCH = {
    "bert-large": 8192,
    "gpt2-xl": 1024,
    "gpt3-350m": 819,
    "gpt3-2.7b": 512,
    "gpt3-6.7b": 1024,
}  # the artifact's
TIMING_BATCH = 1024
PAPER_NODES = 30


def specs(setting: Setting) -> list[RunSpec]:
    quick = setting.quick
    out = []
    nodes = 16 if quick else PAPER_NODES
    for model in ("gpt3-350m", "gpt3-2.7b") if quick else TEMPLATE_MODELS:
        out.append(
            RunSpec(
                NAME,
                KIND,
                {
                    "part": "templates",
                    "model": model,
                    "gpu": "v100-16gb",
                    "gpus_per_node": 1,
                    "nodes": nodes,
                    "global_batch": GLOBAL_BATCH[model],
                },
            )
        )
    for model in ("gpt3-2.7b",) if quick else THROUGHPUT_MODELS:
        for f in range(3 if quick else 4):
            out.append(
                RunSpec(
                    NAME,
                    KIND,
                    {
                        "part": "throughput",
                        "model": model,
                        "gpu": "v100-16gb",
                        "gpus_per_node": 1,
                        "nodes": nodes,
                        "global_batch": GLOBAL_BATCH[model],
                        "fault_tolerance": f,
                    },
                )
            )
    for model in ("gpt3-350m", "gpt3-2.7b") if quick else TIMING_MODELS:
        for count in (8, 16) if quick else TIMING_NODES:
            out.append(
                RunSpec(
                    NAME,
                    KIND,
                    {
                        "part": "timing",
                        "model": model,
                        "gpu": "a100-80gb",
                        "gpus_per_node": 8,
                        "nodes": count,
                        "global_batch": TIMING_BATCH,
                        "fault_tolerance": 1,
                    },
                )
            )
    return out


def run_planner(spec: RunSpec, run_dir: Path) -> Mapping[str, Any]:
    """Sweep runner for the three parts (module level: it crosses process boundaries)."""
    from planner.analytic import get_shape
    from planner.catalog import resolve_profile
    from planner.errors import InfeasibleError
    from planner.hardware import make_cluster
    from planner.plan import JobSpec
    from planner.planner import Planner

    p = spec.params
    part = p["part"]
    if part not in ("templates", "throughput", "timing"):
        raise ValueError(f"unknown planner experiment part {part!r}")
    cluster = make_cluster(p["gpu"], p["nodes"], p["gpus_per_node"])
    profile = resolve_profile(p["model"], cluster.gpu, 1)
    summary: dict[str, Any] = {"params_billion": get_shape(p["model"]).num_params / 1e9, "outcome": "ok"}
    rows = []
    if part == "templates":
        planner = Planner(profile, cluster, JobSpec(p["global_batch"], 1, 0))
        templates = planner.template_set()
        for template in templates.templates:
            rows.append(
                {
                    "nodes": template.num_nodes,
                    "stages": template.num_stages,
                    "iteration_s": template.iteration_time(p["global_batch"]),
                    "max_gpu_memory_gib": max(s.memory_bytes for s in template.stages) / 2**30,
                }
            )
        summary.update(
            min_nodes=templates.min_nodes,
            templates=len(templates.templates),
            usable_memory_gib=cluster.usable_memory_bytes / 2**30,
        )
    elif part == "throughput":
        planner = Planner(profile, cluster, JobSpec(p["global_batch"], 1, p["fault_tolerance"]))
        for count in range(1, p["nodes"] + 1):
            try:
                plan = planner.instantiate([f"n{i}" for i in range(count)])
                rows.append({"nodes": count, "samples_per_s": plan.samples_per_s, "pipelines": plan.num_pipelines})
            except InfeasibleError:
                rows.append({"nodes": count, "samples_per_s": math.nan, "pipelines": 0})
        summary["max_samples_per_s"] = max(
            (r["samples_per_s"] for r in rows if r["samples_per_s"] == r["samples_per_s"]), default=math.nan
        )
    else:
        start = time.perf_counter()
        try:
            planner = Planner(profile, cluster, JobSpec(p["global_batch"], 1, p["fault_tolerance"]))
            templates = planner.template_set()
            middle = time.perf_counter()
            planner.instantiate([f"n{i}" for i in range(p["nodes"])])
            end = time.perf_counter()
            summary.update(
                templates_s=middle - start,
                instantiate_s=end - middle,
                planning_s=end - start,
                templates=len(templates.templates),
                min_nodes=templates.min_nodes,
            )
        except InfeasibleError as exc:
            summary.update(
                outcome="infeasible",
                infeasible_reason=str(exc),
                planning_s=math.nan,
                templates_s=math.nan,
                instantiate_s=math.nan,
            )
    pd.DataFrame(rows).to_csv(run_dir / "rows.csv", index=False)
    return summary


def rows(table: pd.DataFrame, out_dir: Path, part: str) -> pd.DataFrame:
    """Every run's rows.csv of one part, with the run's parameters alongside."""
    frames = []
    for _, run in table[table["part"] == part].iterrows():
        path = Path(out_dir) / "runs" / run["key"] / "rows.csv"
        if path.exists() and path.stat().st_size > 1:
            frame = pd.read_csv(path)
            for column in ("model", "fault_tolerance", "usable_memory_gib"):
                if column in run and run[column] == run[column]:
                    frame[column] = run[column]
            frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def figures(table: pd.DataFrame, out_dir: Path) -> dict[str, Figure]:
    figs: dict[str, Figure] = {}
    templates = rows(table, out_dir, "templates")
    if not templates.empty:
        figs["planner-template-time"] = plots.lines(
            templates,
            x="nodes",
            y="iteration_s",
            series="model",
            xlabel="template size (nodes)",
            ylabel="one pipeline, whole batch (s)",
            logy=True,
            title="Pipeline templates, V100 16 GB per node",
        )
        fig = plots.lines(
            templates,
            x="nodes",
            y="max_gpu_memory_gib",
            series="model",
            xlabel="template size (nodes)",
            ylabel="fullest GPU (GiB)",
            title="Template memory, V100 16 GB per node",
        )
        usable = float(table.loc[table["part"] == "templates", "usable_memory_gib"].iloc[0])
        fig.axes[0].axhline(usable, color="#555555", ls="--", lw=1, label="usable memory")
        fig.axes[0].legend(frameon=False, fontsize=6)
        figs["planner-template-memory"] = fig
    throughput = rows(table, out_dir, "throughput")
    if not throughput.empty:
        throughput["f"] = throughput["fault_tolerance"].astype(int)
        figs["planner-throughput-f"] = plots.lines(
            throughput.dropna(subset=["samples_per_s"]),
            x="nodes",
            y="samples_per_s",
            series="f",
            panel="model",
            series_fmt="f = {}",
            xlabel="nodes",
            ylabel="plan throughput (samples/s)",
            title="Best plan vs nodes and fault tolerance, V100 16 GB per node",
        )
    timing = table[(table["part"] == "timing") & (table["outcome"] == "ok")]
    if not timing.empty:
        timing = timing.assign(cluster=timing["nodes"].map(lambda n: f"{n} nodes"), size=timing["model"])
        figs["planner-time-vs-model"] = plots.lines(
            timing,
            x="params_billion",
            y="planning_s",
            series="cluster",
            xlabel="model size (billion parameters)",
            ylabel="planning time (s)",
            logx=True,
            logy=True,
            title="Planning time, 8 x A100 80 GB per node, f = 1",
        )
        figs["planner-time-vs-nodes"] = plots.lines(
            timing,
            x="nodes",
            y="planning_s",
            series="size",
            xlabel="cluster size (nodes of 8 x A100 80 GB)",
            ylabel="planning time (s)",
            logx=True,
            logy=True,
            xticks=sorted(set(timing["nodes"])),
            title="Templates + instantiation, f = 1",
        )
    return figs


EXPERIMENT = Experiment(
    name=NAME,
    description="planner: template iteration time and memory vs nodes, plan throughput vs nodes for f = 0..3, planning time vs model and cluster size",
    paper_figures=(),
    notebook="notebooks/planner_figures.py",
    specs=specs,
    figures=figures,
    runner=run_planner,
    family="planner figures",
    processes=1,
)
