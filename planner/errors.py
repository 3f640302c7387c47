"""Errors the planner raises: all are ValueErrors whose message names the problem."""

from __future__ import annotations


class PlannerError(ValueError):
    """Bad input to the planner (malformed profile, unknown name, inconsistent job)."""


class ProfileError(PlannerError):
    """A layer profile that cannot be used; the message names the file and the layer."""


class InfeasibleError(PlannerError):
    """The request cannot be planned: the model does not fit, too few nodes for f, ..."""
