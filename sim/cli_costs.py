"""`ooblab costs`: the built-in cost profiles, or one profile's prices and their sources."""

from __future__ import annotations

import argparse
import json
import sys

from .cost_profiles import KEYS, CostProfileError, get


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "costs",
        help="the cost profiles a simulation can name (--costs): each price with its unit and source",
        description="List the built-in cost profiles, or show one (a name or a .json file) with every price's "
        "unit and source. --json prints the file form, to copy and edit.",
    )
    parser.add_argument("profile", nargs="?", default=None, help="a built-in's name or a .json file (default: list)")
    parser.add_argument("--json", action="store_true", help="print JSON (one profile: its file form)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from .cost_profiles import BUILTIN

    try:
        profiles = [get(args.profile)] if args.profile is not None else list(BUILTIN.values())
    except CostProfileError as exc:
        print(f"ooblab costs: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        data = profiles[0].to_dict() if args.profile is not None else [p.to_dict() for p in profiles]
        print(json.dumps(data, indent=2))
        return 0
    for profile in profiles:
        print(f"{profile.name}: {profile.description}")
        for key, cost in profile.costs.items():
            value = str(cost.value).lower() if isinstance(cost.value, bool) else f"{cost.value:g}"
            print(f"  {key:24s} {value:>10} {cost.unit:9s} {cost.source}")
        unset = [key for key in KEYS if key not in profile.costs]
        if unset:
            print(f"  (the calibration's defaults for {', '.join(unset)})")
        print()
    return 0
