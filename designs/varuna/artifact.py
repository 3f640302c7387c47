"""Varuna as the published artifact's simulator models it (`planner.policies.artifact`).

Every removal is a restart that rolls back to the last completed checkpoint (unless
`rollback` is off, as in the paper's spot-trace figures for the smaller models);
checkpoints every 10 iterations and after the first iteration following a restart; new
nodes join at the next restart (or during one).
"""

from __future__ import annotations

from planner.policies.artifact import ARTIFACT_MIN_NODES, ArtifactPolicy, nodes_plan
from planner.policies.decisions import CheckpointSchedule, ClusterView, Decision, Restart, RestartFromCheckpoint, Start

ARTIFACT_VARUNA_CHECKPOINT_EVERY = 10


class ArtifactVarunaPolicy(ArtifactPolicy):
    """Varuna in the artifact's model: restart on every removal."""

    name = "varuna"

    def __init__(
        self,
        min_nodes: int = ARTIFACT_MIN_NODES,
        *,
        rollback: bool = True,
        checkpoint_every: int = ARTIFACT_VARUNA_CHECKPOINT_EVERY,
    ):
        super().__init__(min_nodes)
        self.rollback = rollback
        self.checkpoints = CheckpointSchedule(every_iterations=checkpoint_every, after_restart=True)

    def _on_removal(self, view: ClusterView, started: bool, first: bool) -> Decision:
        new = nodes_plan(view.ready, self.min_nodes)
        if new is None:
            return self._wait(view, started, rollback=self.rollback)
        if first:
            return Decision(new, (Start(),), started)
        action = RestartFromCheckpoint("node removed") if self.rollback else Restart("node removed")
        return Decision(new, (action,), started)

    def _resume_action(self):
        return Restart("enough nodes again")
