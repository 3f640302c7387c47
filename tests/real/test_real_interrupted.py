"""A run stopped from outside (Ctrl-C on the terminal's process group, or SIGTERM to the
launcher, as a batch system sends it) ends with one line, reaps its workers and leaves the
run so far on disk, its summary saying it was interrupted."""

from __future__ import annotations

import json
import os
import select
import signal
import time

import pytest

from .conftest import finish, start


def wait_for(process, words: str, timeout_s: float) -> str:
    """Read the launcher's stderr until a line holds `words`."""
    seen, deadline = [], time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([process.stderr], [], [], 1.0)
        if ready:
            line = process.stderr.readline()
            seen.append(line)
            if words in line:
                return "".join(seen)
    os.killpg(process.pid, signal.SIGKILL)
    pytest.fail(f"no {words!r} within {timeout_s} s:\n{''.join(seen)[-3000:]}")


@pytest.mark.timeout(150)
@pytest.mark.parametrize(("how", "code"), [("ctrl-c", 130), ("sigterm", 128 + signal.SIGTERM)])
def test_an_interrupted_run_says_so_and_keeps_its_record(tmp_path, how, code):
    process = start(["run", "--nodes", "2", "--f", "1", "--steps", "100000", "--out", str(tmp_path)])
    wait_for(process, 'checkpoint {"step": 20,', 90)  # twenty steps committed
    if how == "ctrl-c":
        os.killpg(process.pid, signal.SIGINT)  # the terminal sends it to the whole group
    else:
        process.send_signal(signal.SIGTERM)  # to the launcher only
    done = finish(process, 60)  # also checks no worker is left
    assert done.returncode == code, done.stderr[-3000:]
    if how == "ctrl-c":
        last = done.stderr.strip().splitlines()[-1]
        assert last == f"ooblab run: interrupted; the run so far is in {tmp_path}"
        assert "Traceback" not in done.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "interrupted"
    assert summary["reason"] == ("interrupted by Ctrl-C" if how == "ctrl-c" else "interrupted by a signal (exit 143)")
    assert 20 <= summary["num_iterations"] < 100000
    kinds = [json.loads(line)["kind"] for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert kinds[-1] == "interrupted" and kinds.count("interrupted") == 1
