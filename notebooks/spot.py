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
# # Throughput over time on spot traces (the paper's Figures 10, 14 and 15)
#
# The artifact's two spot traces rescaled to 15-30 nodes (the file named "GCP" is its
# rescaled g4dn trace; without `../shared` generated look-alikes stand in and are labelled
# so). Each panel shows committed throughput in 15-minute bins: samples of iterations that
# are never rolled back, so work a restart throws away counts as nothing. Dotted lines are
# each run's average; the live node count is underneath.

# %%
from experiments import notebook as nb
from experiments import spot

table, out = nb.results("spot")
figures = spot.figures(table, out)

# %% [markdown]
# **Figure 10**: one model (GPT-3 6.7B in the full setting) on both traces. Oobleck follows
# the node count: its throughput moves with the cluster and drops only for the seconds of
# each reconfiguration. Varuna spends most of the run restarting and redoing work, so its
# curve is a series of short bursts; Bamboo cannot hold the model.

# %%
nb.show(figures, *[name for name in figures if name.startswith("fig10")])

# %% [markdown]
# **Figures 14 and 15**: every model on the GCP and the EC2 P3 trace. The smaller the model
# (and the shorter its restart), the closer Varuna gets to Oobleck; Bamboo, where it fits,
# pays for its redundancy all the time. In the planner calibration the models that need
# several nodes per replica (GPT-2 XL, GPT-3 2.7B and 6.7B) also show gaps for Oobleck: on
# the bursty P3 trace, bursts of preemptions sometimes take every replica of a layer (f = 1)
# and Oobleck falls back to its hourly checkpoint. The fault-tolerance notebook asks what
# a larger f buys there.

# %%
nb.show(figures, *[name for name in figures if name.startswith(("fig14", "fig15"))])

# %%
table.pivot_table(index=["calibration", "model"], columns=["spot", "system"], values="avg_samples_per_s").round(1)
