"""The real backend: the planner's plans executed by real processes on torch.distributed.

Subpackages by side (the rule is checked by tests/test_dependency_rule.py):

    config      what to run (imports nothing of real)
    protocol/   what both sides agree on: store keys, commit, directive, layout, sources
    state/      layer state, transfers, checkpoints            (imports protocol)
    models/     tiny-gpt, emulated compute, reference training (imports config only)
    worker/     one process per GPU                            (protocol, state, models)
    control/    the coordinator                                (protocol, state, models)
    launch/     local launcher, node launcher, CLI, profiler   (anything in real)

The worker and control sides never import each other: they meet only through the store,
whose keys and messages are `protocol`'s. `real` imports planner (and may import
traces), never sim or simpy.
"""
