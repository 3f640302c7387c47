"""What the failure campaigns (`failure_campaign.py`, `netns_campaign.py`) share: the seeded
order of their kinds and their command line."""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Sequence


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
