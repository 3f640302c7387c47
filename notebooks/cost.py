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
# # Dollars per million samples: spot against on-demand
#
# Every present node is charged, idle or not: 0.91 $/node-hour on spot (p3.2xlarge, the
# artifact's price), 3.06 $/node-hour on demand. The dashed line is each model's cheapest
# system on an on-demand cluster of 30 nodes with no preemption for 12 hours.

# %%
from experiments import cost
from experiments import notebook as nb

table, out = nb.results("cost")
figures = cost.figures(table, out)

# %% [markdown]
# Oobleck on spot nodes costs about a third of the on-demand reference (the price ratio
# 0.91 / 3.06 is 0.30), because it wastes little of the time it pays for; in the planner
# calibration the bursty spot traces push the larger models towards two thirds (restarts
# from checkpoint). Varuna keeps the spot discount only where failures are rare: with a
# failure every 10 minutes, or on the spot traces, its GPT-3 2.7B and 6.7B runs cost one
# to three times the on-demand price, since restarts are paid for and produce nothing.
# Bamboo pays for its redundancy on every trace: in the artifact calibration, whose
# tables give it a third of Oobleck's throughput, it costs as much as on-demand or more. "OOM": the system cannot hold the model;
# "no progress": nothing committed.

# %%
nb.show(figures)

# %%
table.assign(usd_per_million=cost.usd_per_million(table)).pivot_table(
    index=["calibration", "model"], columns=["trace_key", "system"], values="usd_per_million"
).round(0)
