"""Start-ups that share a host's cores, and the pause queue (`sim.engine`).

With `startup_cores`, a node added once training has begun and each restart's start-up
start in the host's pool (`sim.startup_pool`); a restart's pause segment then ends when the
pool says, and is re-timed as the pool's crowd changes. A pause is a queue of timed
segments (state, seconds, action), begun one after another.
"""

from __future__ import annotations

import math

from planner.records import (
    EventRecord,
)

from .engine_state import PAUSE_STATE, PAUSED, STARTUP_HOLD, EngineState, _Urgent  # noqa: F401
from .timing import RESTARTS, restart_startup_s


class PausesPart(EngineState):
    """Start-ups that share a host's cores, and the pause queue."""

    # -- start-ups sharing the host (`startup_cores`) ---------------------------------------
    def _pool_lose(self, node: str, born: int) -> None:
        """`node` left: its start-up, or its processes in the restart starting, stop."""
        assert self.pool is not None
        self._pool_sync()
        self.pool.remove(("node", node, born))
        if self._crowd is not None and node in self._crowd[2]:
            self.pool.shrink(self._crowd[0], self.timing.gpus_per_node)
        self._pool_changed()

    def _pool_sync(self) -> None:
        """Bring the pool to now; nodes whose start-up ended are ready (their wake-up,
        an urgent event, normally got there first)."""
        assert self.pool is not None
        started = [
            k[1]
            for k in self.pool.advance(self.env.now)
            if isinstance(k, tuple) and k[0] == "node" and self.present.get(k[1]) == k[2]
        ]
        if not started:
            return
        self._ready_tuple = None
        for node in started:
            self.ready[node] = None
            del self.starting[node]
        self.events.append(EventRecord(self.env.now, "ready", {"nodes": started}))
        if self.env.active_process is self.job:
            self.pending_ready.extend(started)  # seen at the job's next stop
        else:
            self.job.interrupt(("ready", tuple(started)))

    def _pool_changed(self) -> None:
        """The starting processes changed: re-time the restart starting and wake at the
        next start-up to finish."""
        assert self.pool is not None
        self._retime_crowd()
        self._pool_wake += 1
        at = self.pool.next_finish()
        if at < math.inf:
            self.env.process(self._pool_wait(self._pool_wake, at))

    def _pool_wait(self, wake: int, at: float):
        yield _Urgent(self.env, max(0.0, at - self.env.now))
        if wake == self._pool_wake:
            self._pool_done()

    def _pool_done(self) -> None:
        self._advance()
        self._pool_sync()
        self._pool_changed()

    def _crowd_end_s(self) -> float | None:
        """When the restart starting now will end its segment (None: none is starting)."""
        if self.pool is None or self._crowd is None or self._crowd[0] not in self.pool:
            return None
        self._pool_sync()
        return self.pool.finish_s(self._crowd[0]) + self._crowd[1]

    def _retime_crowd(self) -> None:
        """The pause segment waiting on the restart's start-up ends when it does."""
        end = self._crowd_end_s()
        if end is None or self.mode != PAUSED or not self.segments:
            return
        action = self.segments[0][2]
        if (action is STARTUP_HOLD or isinstance(action, RESTARTS)) and abs(end - self.pause_end_t) > 1e-9:
            self.pause_end_t = end
            if self.env.active_process is not self.job:
                self.job.interrupt(("retime", ()))

    def _begin_segment(self) -> None:
        """The pause's first segment starts now: a restart's start-up joins the pool."""
        state, seconds, action = self.segments[0]
        self.pause_end_t = self.env.now + seconds
        if self.pool is None or self.decision is None or not isinstance(action, RESTARTS):
            return
        plan = self.decision.plan
        nodes = self._relaunched  # the nodes whose processes it starts, as priced
        startup = restart_startup_s(self.timing, action, plan, nodes)
        if startup <= 0 or plan is None:
            return
        self._pool_sync()
        if self._crowd is not None:
            self.pool.remove(self._crowd[0])
        self._crowds += 1
        key = ("restart", self._crowds)
        self.pool.add(key, len(nodes) * self.timing.gpus_per_node, startup)
        self._crowd = (key, max(0.0, seconds - startup), nodes)
        self._pool_changed()

    # -- pauses ----------------------------------------------------------------------------
    def _pause(self, segments, *, periodic: bool, resume: bool = False) -> None:
        self.mode = PAUSED
        self.periodic = periodic
        self.resume = resume
        self.segments = list(segments)
        self._begin_segment()
