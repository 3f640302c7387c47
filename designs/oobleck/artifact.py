"""Oobleck as the published artifact's simulator models it (`planner.policies.artifact`).

Every removal (working, spare or starting node) ends the iteration in flight and
reconfigures over all usable nodes; a removal during a reconfiguration starts it over;
nodes that become usable while training wait until the next reconfiguration, those that
become usable during one join it. Below `min_nodes` usable nodes it waits.
"""

from __future__ import annotations

from planner.policies.artifact import ArtifactPolicy, nodes_plan
from planner.policies.decisions import ClusterView, Decision, Reinstantiate, Start


class ArtifactOobleckPolicy(ArtifactPolicy):
    """Oobleck in the artifact's model: reconfigure on every removal."""

    name = "oobleck"

    def _on_removal(self, view: ClusterView, started: bool, first: bool) -> Decision:
        new = nodes_plan(view.ready, self.min_nodes)
        if new is None:
            return self._wait(view, started)
        return Decision(new, (Start() if first else Reinstantiate("node removed"),), started)

    def _resume_action(self):
        return Start()
