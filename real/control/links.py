"""Network faults handed to whoever owns the links.

The coordinator schedules a link fault (`--inject ...:netdown|netup|slow`) like any other
injection, but it cannot carry one out: the links of a cluster belong to its switches, and
those of namespace hosts to the machine that made them. It appends one JSON line per fault
to the link-control file (`ooblab coordinator --net-control FILE`), and the owner of the
links (`real.launch.netns_job.NetJob`) reads the file and acts. Each line holds the kind, the
node, a slow link's rate, the coordinator's wall-clock stamp and the entry's label.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class LinkRequest:
    """One link fault to carry out: `kind` netdown | netup | slow (`rate_kbit`)."""

    kind: str
    node: str
    rate_kbit: int | None
    t_wall: float
    label: str

    def to_line(self) -> str:
        return json.dumps(self.__dict__, sort_keys=True)

    @classmethod
    def from_line(cls, line: str) -> LinkRequest:
        data: dict[str, Any] = json.loads(line)
        return cls(data["kind"], data["node"], data.get("rate_kbit"), float(data["t_wall"]), data.get("label", ""))


class LinkRequests:
    """The coordinator's side: append requests to the link-control file."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def hand_over(self, kind: str, node: str, rate_kbit: int | None, label: str) -> LinkRequest:
        request = LinkRequest(kind, node, rate_kbit, time.time(), label)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(request.to_line() + "\n")
            f.flush()
            os.fsync(f.fileno())
        return request


def read_requests(path: str | Path, offset: int) -> tuple[list[LinkRequest], int]:
    """The requests appended after byte `offset` (whole lines only), and the new offset."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return [], offset
    end = data.rfind(b"\n") + 1
    lines = data[:end].decode("utf-8").splitlines()
    return [LinkRequest.from_line(line) for line in lines if line.strip()], offset + end
