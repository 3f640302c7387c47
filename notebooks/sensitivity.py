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
# # How much each system cares about its pause costs
#
# One pause kind at a time is scaled (0 = free, 1 = calibrated, up to 8x): reconfiguration
# (Oobleck's and Bamboo's re-planning and layer copies), restart (start-ups and restarts)
# and checkpoint. The y axis is committed samples per second over the whole run.

# %%
from experiments import notebook as nb
from experiments import sensitivity

table, out = nb.results("sensitivity")
figures = sensitivity.figures(table, out)

# %% [markdown]
# Varuna's line falls steeply with restart and checkpoint costs: every removal restarts
# it, and it checkpoints every 10 iterations; making both free is what it would take to
# approach Oobleck. Oobleck hardly moves with any of the three on GPT-3 medium: its
# reconfigurations are seconds and it seldom restarts. Bamboo is sensitive to its
# reconfiguration cost (it relaunches its workers). In the planner calibration Oobleck on
# GPT-3 6.7B and the P3 trace is dominated by restarts from checkpoint (bursts take every
# replica of a layer with f = 1), so its curve is erratic there: small changes in timing
# change which bursts land during a restart.

# %%
nb.show(figures)
