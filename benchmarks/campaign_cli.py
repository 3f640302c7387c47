"""What the failure campaigns (`failure_campaign.py`, `netns_campaign.py`) share: the seeded
order of their kinds, their command line, and running the scenarios with their totals."""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any


def kind_of(seed: int, index: int, kinds: Sequence[str]) -> str:
    """Kind of run `index`: block b of len(kinds) runs is a seeded shuffle of the kinds, so
    every block holds one of each and a shorter campaign is a prefix of a longer one."""
    order = list(kinds)
    random.Random(f"{seed}/kinds/{index // len(kinds)}").shuffle(order)
    return order[index % len(kinds)]


def parser(description: str, runs: int, seed: int) -> argparse.ArgumentParser:
    """--runs, --seed, --first, --limit, --log and --dry-run, with the campaign's defaults."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--runs", type=int, default=runs, help="scenarios to draw and run")
    p.add_argument("--seed", type=int, default=seed, help="the campaign's seed")
    p.add_argument("--first", type=int, default=0, help="skip the scenarios before this index")
    p.add_argument("--limit", type=float, default=300.0, help="seconds a run may take before it counts as a hang")
    p.add_argument("--log", default=None, help="append one JSON line per run here")
    p.add_argument("--dry-run", action="store_true", help="print the scenarios only")
    return p


def bad_arguments(args: argparse.Namespace, name: str) -> bool:
    """Say in one line (on stderr) what is wrong with the numbers, if anything."""
    if args.runs < 1 or args.first < 0 or args.limit <= 0:
        print(f"{name}: error: --runs must be >= 1, --first >= 0, --limit > 0", file=sys.stderr)
        return True
    return False


def run_all(
    scenarios: Sequence[Any], run: Callable[[Any], Any], row: Callable[[Any], str], log: str | None, seed: int
) -> tuple[list[Any], float]:
    """Run each scenario (`run` returns its outcome, a dataclass), print its row as it ends
    and append it to `log` as a JSON line; (the outcomes, seconds taken)."""
    outcomes = []
    start = time.perf_counter()
    for scenario in scenarios:
        outcome = run(scenario)
        outcomes.append(outcome)
        print(row(outcome), flush=True)
        if log:
            with open(log, "a") as handle:
                handle.write(json.dumps({**asdict(outcome), "seed": seed}) + "\n")
    return outcomes, time.perf_counter() - start


def totals(outcomes: Sequence[Any], seed: int, total_s: float, kinds: Sequence[str]) -> tuple[bool, list[float]]:
    """Print the verdict counts and the kinds run; (every run ok, the recoveries sorted)."""
    count = {v: sum(o.verdict == v for o in outcomes) for v in ("ok", "mismatch", "failed", "hang")}
    print(
        f"\n{len(outcomes)} runs (seed {seed}) in {total_s / 60:.1f} min: {count['ok']} ok, {count['hang']} hangs, "
        f"{count['mismatch']} mismatches, {count['failed']} failed"
    )
    print("kinds: " + ", ".join(f"{k} {sum(o.scenario.kind == k for o in outcomes)}" for k in kinds))
    return count["ok"] == len(outcomes), sorted(x for o in outcomes for x in o.recovery_s)


def recovery_summary(recoveries: Sequence[float]) -> str:
    """ "recoveries N (median M s, max X s)" of sorted recovery times."""
    median = recoveries[len(recoveries) // 2] if recoveries else float("nan")
    return f"recoveries {len(recoveries)} (median {median:.2f} s, max {max(recoveries, default=float('nan')):.2f} s)"
