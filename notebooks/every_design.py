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
# # Every design
#
# Every design registered for the simulator (the paper's three and those added since),
# planner calibration, with its default options: the paper's five fixed-frequency traces,
# its two scaled spot traces and every other real trace in `../shared/traces` scaled to a
# 30-node peak (the paper's five models on one V100 per node), and the datacenter trace
# at three cluster sizes (GPT-3 175B on nodes of 8 x A100, global batch 24 x nodes).
# Each design that writes periodic checkpoints also runs with the adaptive interval
# (Daly's rule from the checkpoints charged and the failures seen so far).
#
# Throughput is committed samples over the whole run, shown as a share of the best
# default design on the same trace and model; dollars per million committed samples
# charge every present node.

# %%
from experiments import designs
from experiments import notebook as nb

table, out = nb.results("designs")
figures = designs.figures(table, out)

# %% [markdown]
# Per design: its mean share of the best design's throughput in each trace family, how
# often it is the best, its cost against the cheapest design on the same run, the
# non-useful bucket where it lost the most time, and what the adaptive checkpoint
# interval did to its throughput (ratio to the default schedule). The rows print as
# the table in docs/designs.md.

# %%
summary = designs.summary(table)
summary.round(3)

# %%
nb.show(figures)
