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
# # Throughput vs failure frequency (the paper's Figures 9 and 13)
#
# Thirty nodes, one removed every 6 h, 3 h, 1 h, 30 min or 10 min (the artifact's traces,
# generated event for event), five models, three systems, in both calibrations: the
# artifact's measured tables (`artifact`) and our planner's cost model (`planner`).
# Runs with `OOBLAB_QUICK=1` use two models and three frequencies; `ooblab reproduce
# frequency` (or running this notebook without it) does the full set.

# %%
from experiments import frequency
from experiments import notebook as nb

table, out = nb.results("frequency")
figures = frequency.figures(table, out)

# %% [markdown]
# **Figure 9.** Oobleck's bars stay nearly flat as failures become more frequent: a failure
# costs it one reconfiguration (seconds) and the iteration in flight. Varuna loses more
# at each step to the left, because every removal restarts it and rolls it back to its
# last checkpoint; for GPT-3 6.7B in the artifact calibration it makes no progress at all
# with a failure every 10 minutes. Bamboo, which runs redundant computation all the time,
# stays well below both where it fits, and cannot hold the GPT-3 models in the artifact's
# tables ("OOM"); our planner calibration fits it up to GPT-3 2.7B.

# %%
nb.show(figures, *[name for name in figures if name.startswith("fig09")])

# %% [markdown]
# **Figure 13.** "Varuna (no ckpt cost)" writes a free checkpoint every 2 iterations (the
# artifact's setting for this figure): checkpoints cost nothing and a rollback loses at
# most two iterations, but each removal still pays a full restart. It recovers part of the
# gap at high frequencies, and can edge past Oobleck when failures are rare (its table
# throughput at a given node count is sometimes higher), but Oobleck stays ahead once
# failures come every hour or faster.

# %%
nb.show(figures, *[name for name in figures if name.startswith("fig13")])

# %%
table.pivot_table(index=["calibration", "model"], columns=["trace_label", "system"], values="avg_samples_per_s").round(
    1
)
