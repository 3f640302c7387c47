"""The longer search of the command-line fuzz test: fresh draws, many examples a test.

    python benchmarks/fuzz_cli.py [--examples 500]

Runs tests/test_fuzz_cli.py with `OOBLAB_FUZZ_EXAMPLES` examples per test on new random
draws (`OOBLAB_FUZZ_RANDOM=1`; CI draws 40 the same way every run) and prints the cases
tried and what failed (hypothesis shrinks each failure to its smallest argv).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = 4  # the fuzz tests in tests/test_fuzz_cli.py


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=500, help="examples per test (default 500)")
    args = parser.parse_args(argv)
    env = {**os.environ, "OOBLAB_FUZZ_EXAMPLES": str(args.examples), "OOBLAB_FUZZ_RANDOM": "1"}
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_fuzz_cli.py"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - start
    tail = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "no output"
    print(f"{args.examples * TESTS} cases tried in {wall:.0f} s: {tail}")
    if done.returncode:
        print(done.stdout[-6000:])
    return done.returncode


if __name__ == "__main__":
    raise SystemExit(main())
