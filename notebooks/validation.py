# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Validation: the simulator against the real backend
#
# The same trace, time-compressed, is replayed twice: on the real backend (worker
# processes that are really killed and started, Oobleck reconfiguring live, Varuna
# checkpointing and restarting every process) and in the simulator, in its planner
# calibration, on the same profile, cluster, batch, f and checkpoint interval. The
# simulator is told only what was measured apart from the trace: the profile and the
# backend's fixed overheads (a calibration step of two short jobs with one planned crash
# each, and a join). Errors are (simulated - measured) / measured:
#
# - steady-state throughput per phase (between trace events, iterations that overlap no
#   recovery; the median iteration);
# - committed samples at the end of the measured run;
# - each recovery's duration (failure to the completion of the interrupted iteration).
#
# Settings: emulated compute on 8 and 16 nodes (layers sleep their profiled times; a
# synthetic profile of 8 layers of 10 + 20 ms), real compute on 4 nodes (tiny-gpt on CPU,
# profiled first). Traces: the paper's fixed-interval trace, a slice of the EC2 P3 spot
# trace, a generated spot trace. The quick setting (the test suite's) is one small
# emulated validation.

# %%
from experiments import notebook as nb
from experiments.validation import experiment

table, out = nb.results("validation")
figures = experiment.figures(table, out)

# %% [markdown]
# ## Errors
#
# Median absolute relative error per validation, policy and metric; dashed lines are the
# targets (5% throughput, 5% samples, 20% recovery).

# %%
columns = [
    "setting",
    "trace_label",
    "throughput_error",
    "samples_error",
    "recovery_error",
    "oobleck_samples_error",
    "varuna_samples_error",
    "overhead_reconfigure_overhead_s",
    "overhead_restart_overhead_s",
    "overhead_restart_per_process_s",
]
ok = table[table["outcome"] == "ok"]
display(ok[[c for c in columns if c in ok]].round(3))  # noqa: F821 (IPython)
nb.show(figures, "errors")

# %% [markdown]
# ## Timelines
#
# Measured (solid) and simulated (dashed) throughput of every iteration, per setting:
# one row per trace, Oobleck left, Varuna right. Dips are recoveries: Oobleck's last
# about a second, Varuna's are restarts of every worker process.

# %%
nb.show(figures, *[name for name in figures if name.startswith("timelines-")])
