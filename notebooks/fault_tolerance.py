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
# # Choosing f against a trace's burst sizes
#
# Oobleck survives any f simultaneous failures without a restart. Generated spot traces
# with the same removal rate (half the p3 profile's, 30 nodes) but mean burst sizes from 1
# to 6 nodes show what a larger f buys (planner calibration, where f is a real planning
# choice; bands are one standard error over seeds).

# %%
from experiments import fault_tolerance
from experiments import notebook as nb

table, out = nb.results("fault-tolerance")
figures = fault_tolerance.figures(table, out)

# %% [markdown]
# With single-node bursts every f does the same. As bursts grow, f = 0 and f = 1 start to
# lose every replica of some layer and restart from their hourly checkpoint, while
# f = 2 and 3 keep training: for GPT-2 XL and GPT-3 2.7B, f = 2 is worth 5-25 % from mean
# bursts of 1.5 nodes on, and with bursts of 6 nodes f = 3 adds more for GPT-2 XL.
# GPT-3 6.7B needs 9 nodes per replica, so a larger f buys less there. On the paper's scaled P3 trace (mean burst 1.7, up to 5), f = 2 nearly doubles
# GPT-2 XL's and GPT-3 2.7B's throughput over the default f = 1.

# %%
nb.show(figures)
