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
# # The other real traces
#
# Every real trace in `../shared/traces` that spans time, scaled in proportion to a 30-node
# peak (relative drops kept): AWS p3 and g4dn (Oobleck and Bamboo artifacts), Bamboo's GCP
# A100 log, and Bamboo's 2020 g4dn and p2 availability logs. Without `../shared` the
# generated look-alikes of the three fitted traces stand in. Bars: committed samples per
# second over the whole run.

# %%
from experiments import notebook as nb
from experiments import real_traces

table, out = nb.results("real-traces")
figures = real_traces.figures(table, out)

# %% [markdown]
# Oobleck leads on nearly every trace and model. What a trace does to a system follows its
# churn more than its length: the short g4dn 1d log (22 removals per hour, down to 3
# nodes) starves every system, while on the quiet p2 logs the gaps between systems are
# smallest. Bamboo's fixed depth of 12 leaves it idle whenever fewer than 12 nodes are up.

# %%
nb.show(figures)

# %%
table.groupby("trace_key")[
    ["trace_duration_h", "trace_removals_per_hour", "trace_mean_nodes", "trace_min_nodes", "trace_mean_burst"]
].first().round(2)
