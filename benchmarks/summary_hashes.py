"""Hash every run's summary of some experiments, so a restructuring can show it moved no result.

    python benchmarks/summary_hashes.py --out before.json                 # as-run, designs, scale, published
    python benchmarks/summary_hashes.py --out after.json --compare before.json

Each experiment runs into a fresh temporary directory (quick settings where the experiment has
them: `designs --quick`, `scale --quick`; `as-run` and `published` at their one size), and each
row of its results table is hashed with the wall-clock columns left out (`*_wall_s`, the
planning times of `scale`, `seconds`). `--compare` prints the rows whose hash changed and exits
1 when any did.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# (experiment, quick)
DEFAULT = (("as-run", False), ("designs", True), ("scale", True), ("published", False))
WALL_CLOCK = ("templates_s", "instantiate_s", "planning_s", "reconfigure_one_s", "seconds")


def _wall(column: str) -> bool:
    return column in WALL_CLOCK or column.endswith("wall_s") or "wall_clock" in column


def _plain(value: object) -> object:
    """A JSON-able, stable form of a table cell (NaN and None alike)."""
    if hasattr(value, "tolist"):
        value = value.tolist()  # numpy scalars and arrays
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in sorted(value.items())}
    return value


def hashes(name: str, quick: bool, processes: int | None) -> dict[str, str]:
    from experiments.reproduce import results

    with tempfile.TemporaryDirectory() as tmp:
        table, _ = results(name, quick=quick, out_dir=Path(tmp) / name, processes=processes, progress=False)
    out = {}
    for row in table.to_dict(orient="records"):
        kept = {k: _plain(v) for k, v in sorted(row.items()) if not _wall(k)}
        digest = hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()[:16]
        out[f"{name}/{row['key']}"] = digest
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="where to write the hashes (JSON)")
    parser.add_argument("--compare", default=None, help="an earlier --out to compare with")
    parser.add_argument("--only", default=None, help="comma-separated experiments (default: all four)")
    parser.add_argument("--processes", type=int, default=None)
    args = parser.parse_args(argv)
    chosen = [(n, q) for n, q in DEFAULT if args.only is None or n in args.only.split(",")]
    found: dict[str, str] = {}
    for name, quick in chosen:
        start = time.perf_counter()
        part = hashes(name, quick, args.processes)
        found.update(part)
        print(
            f"{name}{' --quick' if quick else ''}: {len(part)} runs in {time.perf_counter() - start:.0f} s", flush=True
        )
    Path(args.out).write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")
    if args.compare is None:
        return 0
    before = json.loads(Path(args.compare).read_text())
    names = {n for n, _ in chosen}
    before = {k: v for k, v in before.items() if k.split("/")[0] in names}
    moved = sorted(k for k in before.keys() & found.keys() if before[k] != found[k])
    gone, new = sorted(before.keys() - found.keys()), sorted(found.keys() - before.keys())
    for key in moved:
        print(f"moved: {key}")
    for key in gone:
        print(f"missing now: {key}")
    for key in new:
        print(f"new: {key}")
    same = len(before.keys() & found.keys()) - len(moved)
    print(f"{same} identical, {len(moved)} moved, {len(gone)} missing, {len(new)} new")
    return 1 if moved or gone or new else 0


if __name__ == "__main__":
    raise SystemExit(main())
