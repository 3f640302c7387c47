"""experiments: the paper's figures and the testbed's own, regenerated from the simulator
and the planner (DESIGN 7).

`registry` names every experiment (one module per family: `frequency`, `spot`,
`breakdown`, `planning`, `cost`, `sensitivity`, `fault_tolerance`, `real_traces`,
`rates`); `reproduce` runs one end to end through `sweep` and draws its figures with
`plots`; `notebook` is what `notebooks/` call. `ooblab reproduce` is the command line.
"""
