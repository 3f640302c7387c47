"""A spawned child whose parent dies while it is still importing does not outlive it
(`real.launch.local.die_with_parent`)."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
from pathlib import Path

import pytest

PARENT_GONE_S = 20.0  # how long the child waits for its parent to exit, at most


def _child(flag: str) -> None:
    from real.launch.local import die_with_parent

    # the child's "imports" last until its parent is gone (reparented), however loaded the machine
    parent = mp.parent_process()
    deadline = time.monotonic() + PARENT_GONE_S
    while parent is not None and os.getppid() == parent.pid and time.monotonic() < deadline:
        time.sleep(0.02)
    die_with_parent()
    Path(flag).write_text("survived")
    time.sleep(30)


def _parent(flag: str, pid_file: str) -> None:
    child = mp.get_context("spawn").Process(target=_child, args=(flag,), daemon=False)
    child.start()
    Path(pid_file).write_text(str(child.pid))
    os._exit(0)  # gone at once, without waiting for its child (as a killed coordinator)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie left for init to reap is gone too
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.timeout(90)
@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="Linux only (prctl, /proc)")
def test_a_child_orphaned_during_its_imports_exits_instead_of_running_on(tmp_path):
    flag, pid_file = tmp_path / "flag", tmp_path / "pid"
    parent = mp.get_context("spawn").Process(target=_parent, args=(str(flag), str(pid_file)))
    parent.start()
    parent.join(30)
    assert parent.exitcode == 0
    pid = int(pid_file.read_text())
    try:
        deadline = time.monotonic() + PARENT_GONE_S + 10
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(pid), "the orphaned child is still running"
        assert not flag.exists(), "the orphaned child went on past die_with_parent"
    finally:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
