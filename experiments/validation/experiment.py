"""The validation experiment: the simulator against the real backend on three traces, for
Oobleck and the Varuna baseline, in three settings.

Settings (compute, nodes, model): emulated 8, 16 and 32 nodes (the synthetic profile), real
4 nodes (tiny-gpt, profiled here). Traces per setting: the paper's fixed-interval trace
(one removal per hour), a slice of a real spot trace (EC2 P3, Bamboo's, hours 10-12,
rescaled onto the node count; without ../shared a generated look-alike stands in and is
labelled so) and a generated spot trace (the P3 fit). Each replays in about 90 s. The
calibration (and tiny-gpt's profile) is measured once per setting and shared by its
three traces: it never sees a trace. The quick setting is `ooblab validate --quick`.

Figures: `errors` (median absolute errors per validation and metric, against the
targets) and `timelines-<setting>` (measured vs simulated throughput over time, one
row per trace, one column per policy). The table holds every error figure.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from ..base import Experiment, Setting
from ..sweep import RunSpec
from .cli import QUICK

NAME = "validation"
KIND = "validate"
TARGETS = {"throughput_error": 0.05, "samples_error": 0.05, "recovery_error": 0.15}
SETTINGS = (
    ("emulated", 8, "synthetic"),
    ("emulated", 16, "synthetic"),
    ("emulated", 32, "synthetic"),
    ("real", 4, "tiny-gpt"),
)
P3 = "bamboo/traces/p3-trace.csv"


def _traces(nodes: int, shared: Path | None) -> list[dict[str, Any]]:
    out = [
        {
            "trace_label": "fixed interval (1 h)",
            "trace": f"fixed:interval=1h,nodes={nodes},removals={2 if nodes < 8 else 3}",
        }
    ]
    if shared is not None and (shared / "traces" / P3).exists():
        out.append(
            {"trace_label": "EC2 P3 spot slice (10-12 h)", "trace": str(shared / "traces" / P3), "window": "10h:12h"}
        )
    else:
        out.append(
            {
                "trace_label": "P3 look-alike (generated; ../shared absent)",
                "trace": "spot:nodes=8,hours=1.4,seed=7,profile=p3",
            }
        )
    out.append(
        {"trace_label": "generated spot (P3 fit)", "trace": f"spot:nodes={min(max(nodes, 8), 32)},hours=1.5,seed=1"}
    )
    return out


def specs(setting: Setting) -> list[RunSpec]:
    if setting.quick:
        return [
            RunSpec(
                NAME,
                KIND,
                {
                    **QUICK,
                    "compute": "emulated",
                    "model": "synthetic",
                    "trace_label": "fixed interval (1 h), quick",
                    "setting": "emulated-4",
                },
            )
        ]
    out = []
    for compute, nodes, model in SETTINGS:
        for trace in _traces(nodes, setting.shared):
            out.append(
                RunSpec(
                    NAME,
                    KIND,
                    {
                        **trace,
                        "compute": compute,
                        "nodes": nodes,
                        "model": model,
                        "setting": f"{compute}-{nodes}",
                        # 16 samples (the default) keep 8 microbatches per 8-stage pipeline up
                        # to 16 nodes; 32 nodes need 32 for the same. 32 processes on 2 cores
                        # create their groups for about a minute, and with the 10 s default
                        # some missed their heartbeats meanwhile (two attempts, 10 workers
                        # and 1 lost): 30 s there
                        **({"global_batch": nodes, "heartbeat_timeout_s": 30.0} if nodes > 16 else {}),
                    },
                )
            )
    return out


def run_validation(spec: RunSpec, run_dir: Path) -> Mapping[str, Any]:
    """Sweep runner: one `validate` per spec; profile and calibration shared per setting
    (`<experiment dir>/calibration/<setting>/`)."""
    from .report import validate
    from .spec import ValidationSpec

    params = {k: v for k, v in spec.params.items() if k not in ("trace_label", "setting")}
    vspec = ValidationSpec(**params, label=spec.params["trace_label"])
    shared_dir = run_dir.parent.parent / "calibration" / f"{spec.params['setting']}-{vspec.model}-b{vspec.global_batch}"
    try:
        report = validate(
            vspec,
            run_dir,
            progress=lambda text: print(
                f"[validation {spec.params['setting']}, {vspec.label}] {text}", file=sys.stderr, flush=True
            ),
            shared_dir=shared_dir,
        )
    except (RuntimeError, ValueError) as exc:  # one failed validation does not sink the others
        return {"outcome": "error", "infeasible_reason": str(exc)}
    row: dict[str, Any] = {
        "outcome": "ok",
        **report["errors"],
        "wall_s": report["wall_s"],
        "time_scale": report["time_scale"],
        "trace_note": report["trace"],
        "model_note": report["model"],
    }
    row.update({f"overhead_{k}": v for k, v in report["overheads"].items()})
    for check in report.get("pace_checks", []):
        row[f"{check['policy']}_pace_drift"] = check["drift"]
    for run in report["runs"]:
        c, p = run["comparison"], run["policy"]
        throughput = [abs(x["error"]) for x in c["phases"] if x["error"] is not None]
        recovery = [abs(x["error"]) for x in c["recoveries"] if x["error"] is not None]
        row.update(
            {
                f"{p}_samples_error": c["samples_error"],
                f"{p}_throughput_error": float(pd.Series(throughput).median()) if throughput else None,
                f"{p}_recovery_error": float(pd.Series(recovery).median()) if recovery else None,
                f"{p}_real_samples": c["real_samples"],
                f"{p}_sim_samples": c["sim_samples"],
                f"{p}_recoveries_real_s": [x["real_s"] for x in c["recoveries"]],
                f"{p}_recoveries_sim_s": [x["sim_s"] for x in c["recoveries"]],
            }
        )
    return row


def error_figure(table: pd.DataFrame):
    import matplotlib.pyplot as plt

    from .. import plots

    metrics = list(TARGETS)
    rows = table.reset_index(drop=True)
    fig, axes = plt.subplots(1, len(metrics), figsize=(12, 0.5 * len(rows) + 1.8), sharey=True)
    labels = [f"{r['setting']}: {r['trace_label']}" for _, r in rows.iterrows()]
    for ax, metric in zip(axes, metrics):
        for i, policy in enumerate(("oobleck", "varuna")):
            column = f"{policy}_{metric}"
            values = [
                abs(v) * 100 if v is not None and pd.notna(v) else 0.0 for v in rows.get(column, [None] * len(rows))
            ]
            ax.barh(
                [y + (0.2 if i else -0.2) for y in range(len(rows))],
                values,
                height=0.38,
                color=plots.color(policy),
                label=plots.label(policy),
            )
        ax.axvline(TARGETS[metric] * 100, color="black", lw=1, ls="--")
        ax.set_title(f"{metric.replace('_', ' ')} (target {TARGETS[metric] * 100:.0f}%)", fontsize=9)
        ax.set_xlabel("median |relative error| (%)")
    axes[0].set_yticks(range(len(rows)), labels, fontsize=8)
    axes[0].invert_yaxis()
    axes[-1].legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig


def timelines_figure(table: pd.DataFrame, out_dir: Path, setting: str):
    import matplotlib.pyplot as plt

    from .. import plots
    from .plots import _steps

    rows = table[table["setting"] == setting].reset_index(drop=True)
    fig, axes = plt.subplots(len(rows), 2, figsize=(12, 2.6 * len(rows)), squeeze=False)
    for i, row in rows.iterrows():
        run_dir = Path(out_dir) / "runs" / row["key"]
        report = json.loads((run_dir / "report.json").read_text())
        for j, policy in enumerate(("oobleck", "varuna")):
            ax = axes[i, j]
            directory = run_dir / policy
            for side, style in (
                ("real", dict(color="tab:blue", lw=1.3, label="measured")),
                ("sim", dict(color="tab:orange", lw=1.1, ls="--", label="simulated")),
            ):
                path = directory / f"timeline_{side}.csv"
                if not path.exists():
                    continue
                frame = pd.read_csv(path)
                xs, ys = _steps(list(zip(frame.time_s, frame.samples_per_s)), float("inf"))
                ax.plot(xs, ys, **style)
            for t in report["trace_events_s"]:
                ax.axvline(t, color="grey", lw=0.7, ls=":")
            errs = (
                f"samples {100 * row[f'{policy}_samples_error']:+.1f}%"
                if pd.notna(row.get(f"{policy}_samples_error"))
                else ""
            )
            ax.set_title(f"{row['trace_label']} - {plots.label(policy)} ({errs})", fontsize=9)
            ax.set_ylim(bottom=0)
            ax.set_ylabel("samples/s", fontsize=8)
            if i == len(rows) - 1:
                ax.set_xlabel("seconds since training started (dotted: trace events)", fontsize=8)
            if i == 0 and j == 0:
                ax.legend(fontsize=8, loc="lower left")
    fig.suptitle(f"Measured vs simulated throughput, {setting}", fontsize=10)
    fig.tight_layout()
    return fig


def figures(table: pd.DataFrame, out_dir: Path) -> dict[str, Any]:
    from .. import plots

    ok = table[table.get("outcome", "ok") == "ok"] if "outcome" in table else table
    if ok.empty:
        return {"errors": plots.text_figure("no validation finished (see results.parquet)")}
    out = {"errors": error_figure(ok)}
    for setting in dict.fromkeys(ok["setting"]):
        out[f"timelines-{setting}"] = timelines_figure(ok, out_dir, setting)
    return out


EXPERIMENT = Experiment(
    name=NAME,
    description="the simulator against the real backend: measured vs simulated throughput, samples and recoveries",
    paper_figures=(),
    notebook="notebooks/validation.py",
    specs=specs,
    figures=figures,
    runner=run_validation,
    family="validation",
    processes=1,
)
