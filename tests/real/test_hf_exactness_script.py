"""`benchmarks/hf_exactness.py` refuses a request it cannot run in one line (exit 2),
before it starts any job."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--steps", "3"], "--steps must be 6 or more"),
        (["--cases", "oobleck,nosuch"], "unknown case 'nosuch'"),
        (["--models", "tiny-gpt"], "'tiny-gpt' is not a Hugging Face model"),
        (["--models", "hf:gpt2:huge"], "huge"),
    ],
)
def test_a_request_it_cannot_run_is_one_line_and_exit_2(args, said):
    result = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "hf_exactness.py"), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and said in lines[0], result.stderr
    assert result.stdout == ""
