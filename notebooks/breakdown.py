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
# # Where the time went (the paper's Figures 1 and 12)
#
# Every second of a run lands in one bucket: useful compute, Bamboo's redundant compute,
# reconfiguration, restart (start-ups included), checkpoint, lost work (iterations cut off
# by a failure or rolled back by a restart) and waiting for nodes. Systems that cannot
# hold a model are left out and named in the panel title.

# %%
from experiments import breakdown
from experiments import notebook as nb

table, out = nb.results("breakdown")
figures = breakdown.figures(table, out)

# %% [markdown]
# **Figure 1**: GPT-2 (the largest model all three systems hold in both calibrations) on
# the 10-minute trace and the EC2 P3 spot trace. Varuna's restarts and checkpoints take a
# quarter of its time or more; Bamboo loses its share to reconfigurations, redundant
# computation and, in the planner calibration, work rolled back by fatal failures.
# Oobleck spends nearly all its time on useful work, with one exception: in the planner
# calibration on the bursty P3 trace, bursts of preemptions take every replica of some
# layer (f = 1) and a third of its time is lost to rollbacks; it still commits more than
# the other two (the fault-tolerance notebook shows what f = 2 changes).

# %%
nb.show(figures, *[name for name in figures if name.startswith("fig01")])

# %% [markdown]
# **Figure 12**: every model on each trace. As models grow, Varuna's restarts (minutes each)
# take over its time. Oobleck's losses grow too, but as lost work: in the artifact's model
# every removal aborts the iteration in flight, and large models have long iterations; in
# the planner calibration, a burst that removes every replica of a layer sends Oobleck
# back to its last checkpoint.

# %%
nb.show(figures, *[name for name in figures if name.startswith("fig12")])
