"""Benchmark helper: run a driver program against one checkout in a fresh interpreter (its
own imports, its own peak memory) and read the JSON object it prints last."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path


def run_driver(code_root: Path, driver: str, args: Sequence[str], timeout_s: float) -> dict | str:
    """The driver's last line as JSON, or why there is none ("not done in ...", "failed: ...")."""
    try:
        out = subprocess.run(
            [sys.executable, "-c", driver, *args],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            cwd=code_root,
            env={"PYTHONPATH": str(code_root), "PATH": "/usr/bin:/bin"},
        )
    except subprocess.TimeoutExpired:
        return f"not done in {timeout_s:g} s"
    if out.returncode:
        return "failed: " + (out.stderr.strip().splitlines() or ["?"])[-1][:160]
    return json.loads(out.stdout.strip().splitlines()[-1])
