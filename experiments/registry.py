"""Every experiment by name (`ooblab reproduce --list`)."""

from __future__ import annotations

import importlib

from .base import Experiment


class UnknownExperiment(ValueError):
    """A name that is not an experiment; the message lists the known ones."""


# module of each experiment, in the order --list and docs/experiments.md show them
MODULES = (
    "frequency",
    "spot",
    "breakdown",
    "planning",
    "cost",
    "sensitivity",
    "fault_tolerance",
    "real_traces",
    "rates",
    "scale",
    "designs",
    "published",
    "as_run",
    "validation.experiment",
)


def all_experiments() -> dict[str, Experiment]:
    found = {}
    for module in MODULES:
        experiment = importlib.import_module(f"experiments.{module}").EXPERIMENT
        found[experiment.name] = experiment
    return found


def get(name: str) -> Experiment:
    experiments = all_experiments()
    if name not in experiments:
        raise UnknownExperiment(
            f"unknown experiment {name!r}; known: {', '.join(experiments)} (ooblab reproduce --list describes them)"
        )
    return experiments[name]
