"""Iterations running back to back at a fixed pace, counted without stepping them.

A stretch knows when the iteration in flight ends (`next_done_t`) and how long each later
one takes (`tau`); the k-th iteration from now ends at next_done_t + (k - 1) tau, always
computed by that one formula so that the engine's stop times and its counts agree to the
last bit. An iteration ending exactly at an instant does not count as ended before it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class Stretch:
    tau: float = math.inf  # seconds per iteration
    useful_fraction: float = 1.0  # the part of it that is not redundant computation
    next_done_t: float = math.inf  # end of the iteration in flight

    def start(self, now: float, tau: float, useful_fraction: float) -> None:
        self.tau, self.useful_fraction = tau, useful_fraction
        self.next_done_t = now + tau

    def end_of(self, k: int) -> float:
        """When the k-th iteration from now (1 = the one in flight) ends."""
        return self.next_done_t + (k - 1) * self.tau

    def ended_before(self, t: float) -> int:
        """How many iterations end strictly before `t`."""
        if self.next_done_t >= t:
            return 0
        count = int((t - self.next_done_t) // self.tau) + 1
        while count > 0 and self.end_of(count) >= t:
            count -= 1
        while self.end_of(count + 1) < t:
            count += 1
        return count

    def advance(self, k: int) -> float:
        """`k` iterations have ended; returns when the last did."""
        last = self.end_of(k)
        self.next_done_t = last + self.tau
        return last

    def retime(self, now: float, tau: float, useful_fraction: float) -> None:
        """The pace changes mid-iteration: what is left of it runs at the new pace."""
        remaining = (self.next_done_t - now) / self.tau
        self.tau, self.useful_fraction = tau, useful_fraction
        self.next_done_t = now + remaining * tau
