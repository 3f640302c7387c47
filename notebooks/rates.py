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
# # Across preemption rates
#
# Generated spot traces (the p3 profile, 30 nodes, 12 hours) with the burst rate scaled
# from a quarter to twice the real EC2 P3 trace's: mean over seeds, with a band of one
# standard error. The y axis is committed samples per second over the whole run.

# %%
from experiments import notebook as nb
from experiments import rates

table, out = nb.results("preemption-rates")
figures = rates.figures(table, out)

# %% [markdown]
# All systems lose throughput as preemptions become frequent, and the cluster shrinks with
# them (replacements take a while to arrive). Oobleck keeps the lead at every rate. In
# relative terms Varuna falls fastest in the artifact calibration (every removal is a
# restart), Bamboo in the planner calibration (losing two neighbouring nodes is fatal
# there, and rolls back to its checkpoint); for GPT-3 2.7B Varuna is down to one or two
# samples per second from about 15 removals per hour. The artifact's tables give Bamboo
# nothing for the GPT-3 models.

# %%
nb.show(figures)
