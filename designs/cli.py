"""`ooblab designs [--json]`, and the design flags every command that runs one shares.

    ooblab designs [--design-module FILE.py ...] [--json]

lists every registered design (the package's, the `ooblab.designs` entry points', and those
of the modules named), its options (name, type, default, unit, where it applies, doc) and
where it runs. The commands that run a design (`ooblab simulate`, `ooblab run`,
`ooblab coordinator`, `ooblab reproduce`) take `--design NAME` (`--policy` is the same flag),
`--set KEY=VALUE` for its options, and `--design-module FILE.py` (repeatable) to load
designs from files first; `add_arguments`, `load_modules` and `split_settings` are theirs.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from . import registry
from .options import WHERE_TITLES, DesignError, parse_text

EXIT_BAD_REQUEST = 2


def add_arguments(parser: argparse._ActionsContainer, default: str | None) -> None:
    """`--design/--policy NAME` (dest `policy`) and `--design-module FILE.py` on `parser`
    (or an argument group)."""
    parser.add_argument(
        "--design",
        "--policy",
        dest="policy",
        default=default,
        metavar="NAME",
        help="fault-tolerance design: oobleck, bamboo, varuna or any registered one (`ooblab designs` lists them)",
    )
    parser.add_argument(
        "--design-module",
        dest="design_modules",
        action="append",
        default=[],
        metavar="FILE.py",
        help="load the designs a Python file defines before anything else (repeatable)",
    )


def load_modules(args: argparse.Namespace) -> list[str]:
    """Register the designs of every `--design-module` file; their names."""
    return registry.load_files(getattr(args, "design_modules", None) or [])


def parse_settings(items: Iterable[str]) -> dict[str, Any]:
    """`KEY=VALUE` strings as a dict (values parsed: true/false, none, numbers, text)."""
    out: dict[str, Any] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise DesignError(f"--set {item!r} is not KEY=VALUE")
        out[key.strip().replace("-", "_")] = parse_text(value)
    return out


def split_settings(
    design: str, settings: Mapping[str, Any], config_fields: Collection[str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """`settings` split into (config fields, design options): an option of `design` goes
    to the config field that carries it where the config has one (the real backend's
    `fault_tolerance`), else to the design options under its own name (the simulator's, for
    every option: Bamboo's `depth`, also when given as `bamboo_depth`); any other key that is a config field goes
    there; the rest are design options, checked when the design is resolved (unknown
    option, option of another design)."""
    mine = registry.get(design).option_specs
    by_name = {s.name: s for s in mine} | {s.legacy: s for s in mine if s.legacy}
    into_fields: dict[str, Any] = {}
    into_options: dict[str, Any] = {}
    for key, value in settings.items():
        spec = by_name.get(key)
        if spec is not None:
            if spec.legacy in config_fields:
                into_fields[str(spec.legacy)] = value
            else:
                into_options[spec.name] = value
        elif key in config_fields:
            into_fields[key] = value
        else:
            into_options[key] = value
    return into_fields, into_options


# -- ooblab designs --------------------------------------------------------------------------
def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "designs",
        help="list the fault-tolerance designs, their options and where they run",
        description="List every registered design: the package's, the ooblab.designs entry points', "
        "and those of --design-module files.",
    )
    parser.add_argument(
        "--design-module", dest="design_modules", action="append", default=[], metavar="FILE.py", help="load first"
    )
    parser.add_argument("--json", action="store_true", help="print a JSON list")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    try:
        load_modules(args)
        found = [d.describe() for d in registry.all_designs()]
    except DesignError as exc:
        print(f"ooblab designs: error: {exc}", file=sys.stderr)
        return EXIT_BAD_REQUEST
    if args.json:
        print(json.dumps(found, indent=2, default=str))
    else:
        print(render(found))
    return 0


def render(found: list[dict[str, Any]]) -> str:
    lines = []
    for d in found:
        where = " and ".join({"simulator": "simulator", "real": "real backend"}[w] for w in d["runs_on"])
        lines += [
            f"{d['display']} (--design {d['name']}): {d['summary']}",
            f"  runs on: {where}; calibrations: {', '.join(d['calibrations'])}",
            f"  detection: {d['detection']}",
        ]
        if not d["options"]:
            lines.append("  no options")
        for o in d["options"]:
            unit = f" {o['unit']}" if o["unit"] else ""
            old = f", also --set {o['legacy']}" if o["legacy"] and o["legacy"] != o["name"] else ""
            reach = ", ".join(WHERE_TITLES[w].removeprefix("the ") for w in o["where"])
            lines.append(f"  {o['name']} ({o['type']}, default {o['default']!r}{unit}; {reach}{old}): {o['doc']}")
        lines.append("")
    return "\n".join(lines).rstrip()
