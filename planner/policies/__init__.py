"""Policies: pure functions from (cluster view, event, plan) to a typed decision."""
