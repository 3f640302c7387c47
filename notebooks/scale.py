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
# # Scale: 64 to 12,500 nodes
#
# GPT-3 175B on nodes of 8 x A100 80 GB, global batch 24 x nodes, Oobleck with f = 3,
# Bamboo and Varuna, planner calibration, on two kinds of trace per size: datacenter
# hardware and software failures at Llama 3's rates, and spot preemptions with the
# profile fitted to the GCP A100 log. Varuna checkpoints at Young's interval
# sqrt(2 C M) for that size (C: its checkpoint cost in the simulator, M: the trace's
# expected mean time between interruptions).
#
# Effective training time is committed samples / (the design's failure-free throughput
# on all the nodes x wall time); throughput per GPU divides committed samples per second
# by the GPUs present on average.

# %%
from experiments import notebook as nb
from experiments import scale

table, out = nb.results("scale")
figures = scale.figures(table, out)

# %% [markdown]
# What changes with size, per trace kind and design (means over seeds): failures come
# N times as often on N nodes, so M falls as 1/N; the checkpoint cost C is whatever the
# simulator's timing says for that plan (with one writer it is the model's bytes over
# the storage bandwidth at every size; with every layer owner writing in parallel it
# falls with N too), and Young's interval follows sqrt(C M).

# %%
summary = scale.summary(table)
summary.round(4)

# %% [markdown]
# The figures: effective training time and throughput per GPU against size, the bytes
# moved by reconfigurations per day, Varuna's C, M and interval, and the wall time of
# Oobleck's planner (templates, instantiation on all nodes, one reconfiguration).

# %%
nb.show(figures)
