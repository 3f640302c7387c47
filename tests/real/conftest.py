"""Helpers for the real backend's multi-process tests.

Every multi-process test runs the launcher as a subprocess in its own session, with a
timeout, and afterwards checks that no process of that session is left (the launcher
spawns its workers with the spawn start method and must reap them on every path).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def session_processes(sid: int) -> list[int]:
    """PIDs (other than zombies) whose session id is `sid`."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        state, session = fields[0], int(fields[3])
        if session == sid and state != "Z":
            pids.append(int(entry.name))
    return pids


def assert_no_leftovers(sid: int, wait_s: float = 5.0) -> None:
    """Fail (after killing them) if processes of session `sid` outlive their launcher."""
    deadline = time.time() + wait_s
    left = session_processes(sid)
    while left and time.time() < deadline:
        time.sleep(0.1)
        left = session_processes(sid)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not left, f"processes left behind by the launcher: {left}"


def reap(*processes: subprocess.Popen) -> None:
    """Kill each launcher's session if it still runs, and check nothing of it is left."""
    for process in processes:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        assert_no_leftovers(process.pid)


@dataclass
class Completed:
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> dict:
        try:
            return json.loads(self.stdout)
        except json.JSONDecodeError:
            raise AssertionError(
                f"not JSON (rc {self.returncode}):\n{self.stdout[-2000:]}\n{self.stderr[-4000:]}"
            ) from None


def start(args: list[str], **kwargs) -> subprocess.Popen:
    """`ooblab ARGS` in a new session (so its whole process tree can be checked)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "ooblab.cli", *args],
        cwd=kwargs.pop("cwd", REPO),
        stdout=kwargs.pop("stdout", subprocess.PIPE),
        stderr=kwargs.pop("stderr", subprocess.PIPE),
        text=True,
        start_new_session=True,
        env=env,
        **kwargs,
    )


def finish(process: subprocess.Popen, timeout_s: float) -> Completed:
    """Wait for `process` (killing its session on timeout) and check nothing is left."""
    try:
        out, err = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        assert_no_leftovers(process.pid)
        pytest.fail(f"ooblab did not finish within {timeout_s} s:\n{out[-2000:]}\n{err[-4000:]}")
    assert_no_leftovers(process.pid)
    return Completed(process.returncode, out, err)


def ooblab(args: list[str], timeout_s: float = 120.0) -> Completed:
    return finish(start(args), timeout_s)


@pytest.fixture(autouse=True, scope="package")
def one_torch_thread():
    """In-process torch work (references, unit tests) on one thread: on a small shared
    machine OpenMP's spinning threads make it many times slower, not faster."""
    torch = pytest.importorskip("torch")
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
