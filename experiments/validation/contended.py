"""Profile a real model as its workers will run: with the other workers computing beside it.

On this testbed's machines the "GPUs" are CPU processes that share the cores, so a
layer's time inside a job of N workers is not its time alone. The validation profiles
the layers (`mb1.json`) beside N - 1 load processes (spawned, each timing the same layers
over and over, one thread each, as a worker runs), then, with the same load processes,
every layer beside k = 0..N - 1 of them (`contention.json`, `real.launch.contention`): the
simulator scales each phase's compute by the factor of its live worker count. It is still
a measurement of the model, made before and apart from any trace; on real GPUs (one per
worker) the load would be pointless and `ooblab profile` alone is the profile.
"""

from __future__ import annotations


def profile_with_neighbours(model, settings, neighbours: int, timeout_s: float = 60.0):
    """`real.launch.profiler.profile_model(model, settings)` with `neighbours` load processes
    (`model`: a `real.models.family.Trained`)."""
    from real.launch.contention import busy_neighbours
    from real.launch.profiler import profile_model

    with busy_neighbours(model, neighbours, settings.threads, timeout_s):
        return profile_model(model, settings)


def profile_contended(model, settings, workers: int):
    """The profile beside `workers` - 1 busy neighbours with its contention sweep over
    0..workers - 1 neighbours (`profile.contention`)."""
    from real.launch.contention import profile_with_contention

    return profile_with_contention(model, settings, range(workers), workers - 1)
