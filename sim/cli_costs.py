"""`ooblab costs`: the built-in cost profiles, one profile's prices and their sources, or
(`--terms`) the table of cost terms every profile prices from."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from .cost_profiles import CostProfileError, get
from .cost_terms import GROUPS, PRICED, TERMS, must_be


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "costs",
        help="the cost profiles a simulation can name (--costs): each price with its unit and source",
        description="List the built-in cost profiles, or show one (a name or a .json file) with every price's "
        "unit and source. --json prints the file form, to copy and edit.",
    )
    parser.add_argument("profile", nargs="?", default=None, help="a built-in's name or a .json file (default: list)")
    parser.add_argument("--json", action="store_true", help="print JSON (one profile: its file form)")
    parser.add_argument(
        "--terms",
        action="store_true",
        help="the table of cost terms instead: each key's unit, default, bounds, calibrations and meaning",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from .cost_profiles import BUILTIN

    if args.terms:
        if args.profile is not None:
            print("ooblab costs: error: --terms shows the table of terms; give no profile with it", file=sys.stderr)
            return 2
        return _terms(args.json)
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
        if profile.base is not None:
            print(f"  (on base {profile.base}: what it leaves out comes from there, marked <- {profile.base})")
        for key, cost in profile.costs.items():
            value = str(cost.value).lower() if isinstance(cost.value, bool) else f"{cost.value:g}"
            m = cost.measured
            measured = "" if m is None else f" [measured at {m.low:,.0f}-{m.high:,.0f} {m.over}]"
            came = f" <- {profile.base}" if key in profile.inherited else ""
            print(f"  {key:24s} {value:>10} {cost.unit:9s} {cost.source}{measured}{came}")
        unset = [key for key in PRICED if key not in profile.costs]
        if unset:
            print(f"  (the calibration's defaults for {', '.join(unset)})")
        print()
    return 0


def _terms(as_json: bool) -> int:
    """The table of cost terms (`sim.cost_terms`), as text or JSON."""
    if as_json:
        rows = [{**asdict(term), "priced": term.priced} for term in TERMS.values()]
        print(json.dumps(rows, indent=2))
        return 0
    for group in GROUPS:
        print(f"{group} terms{'' if group in ('cluster', 'testbed') else ' (not priced by a profile)'}:")
        for term in (t for t in TERMS.values() if t.group == group):
            value = term.default_is if term.default is None else str(term.default).lower()
            where = "both" if term.calibrations != ("planner",) else "planner"
            print(f"  {term.key:26s} {term.unit:9s} {must_be(term.key):26s} {where:8s} {term.meaning}")
            print(f"  {'':26s} default {value}: {term.source}")
        print()
    return 0
