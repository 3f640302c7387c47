"""sim: the simpy trace-replay simulator of Oobleck, Bamboo and Varuna (DESIGN 4).

    from sim import SimConfig, simulate
    result = simulate(SimConfig.of(policy="varuna", model="GPT-3-medium", trace="fixed:interval=1h"))
    result.summary.avg_samples_per_s; result.write()   # results/sim/<run id>/

Exports are loaded on first use, so `ooblab plan` does not import simpy through `sim.cli`.
"""

from __future__ import annotations

from importlib import import_module

_EXPORTS = {
    "SimConfig": "sim.config",
    "SimError": "sim.errors",
    "SimResult": "sim.run",
    "simulate": "sim.run",
    "Simulation": "sim.engine",
    "build": "sim.setup",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'sim' has no attribute {name!r}")
