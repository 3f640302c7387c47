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
# # Published results beside ooblab's predictions
#
# Each row is a figure a large training run published (Llama 3, MegaScale, ByteRobust,
# Kokolis et al.), the setting as near as ooblab can express it, and the simulator's
# prediction under the `h100-datacenter` cost profile (`ooblab costs h100-datacenter` says
# where each price comes from). Rows marked `calibration` set a profile value, so they only
# check that the simulator charges it; `validation` rows are predicted from the others.

# %%
from experiments import notebook as nb
from experiments import published

table, out = nb.results("published")
published.summary(table)

# %%
nb.show(published.figures(table, out))
