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
# # The planner: templates, the price of f, planning time
#
# Three views of the planner (`planner/`), no simulation: the optimal pipeline template
# for each node count on the paper's cluster (one V100 16 GB per node, 10 Gb/s), the best
# plan's throughput for f = 0..3 on 1 to 30 nodes, and how long planning (templates plus
# the instantiation over the whole cluster) takes as models and clusters grow.

# %%
from experiments import notebook as nb
from experiments import planning

table, out = nb.results("planner")
figures = planning.figures(table, out)

# %% [markdown]
# **Templates.** Left: how long one pipeline of each template size takes for the whole
# global batch: more nodes, more stages, shorter iterations, with diminishing returns once
# the bottleneck stage holds a single layer. Right: the fullest GPU of each template
# against the usable memory; the smallest template of each model (n0) is the one that only
# just fits, which is why GPT-3 6.7B needs 9 nodes per replica.

# %%
nb.show(figures, "planner-template-time", "planner-template-memory")

# %% [markdown]
# **The price of f.** Fault tolerance f asks for at least f + 1 pipelines. Where the
# fastest plan already has that many, f costs nothing; it costs a little where it forces
# smaller pipelines, and it cannot be had at all below (f + 1) x n0 nodes (the lines
# start later). For GPT-3 6.7B (n0 = 9) f = 2 needs 27 of the 30 nodes and f = 3 none fit.

# %%
nb.show(figures, "planner-throughput-f")

# %% [markdown]
# **Planning time.** The template search takes under a second for every model up to GPT-3
# 13B and about 1.5 s for 175B on 64 nodes. Instantiation enumerates every multiset of
# templates that covers the cluster: instant up to 32 nodes, but with n0 = 1 (models up
# to 13B fit on one 8-GPU node) and 64 nodes it takes about 20 s, while 175B (n0 = 5)
# stays under 0.1 s. The table below splits the two.

# %%
nb.show(figures, "planner-time-vs-model", "planner-time-vs-nodes")

# %%
table[table["part"] == "timing"][
    ["model", "nodes", "templates", "min_nodes", "templates_s", "instantiate_s", "planning_s"]
].round(3)
