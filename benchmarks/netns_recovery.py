"""Recovery after a link cut and after a crash, against the heartbeat timeout (namespace hosts).

    sudo python benchmarks/netns_recovery.py [--timeouts 2,4,8] [--out docs/figures/netns-recovery.png]

For each heartbeat timeout, two jobs on namespace hosts (`real.launch.netns`; 4 nodes as 2
pipelines of 2, f = 1, float64, heartbeat every 0.25 s), each losing node2 once: its link
cut once training runs, or its worker crashing at the start of step 1 (`--inject`). A
link cut is known only when the heartbeats stop coming: detection is the time from the cut
to the coordinator's `worker_lost` line (this script's clock); a crash closes the worker's
connections, and its peers report it at once. Recovery is the coordinator's own, from
the declared failure to the next completed iteration (`recovery_s`). Prints a table and
draws both against the timeout. A script, not CI: about 35 s a job here.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from real.launch.netns import NetCluster, unavailable  # noqa: E402
from real.launch.netns_job import NetJob  # noqa: E402


def run_one(kind: str, heartbeat_s: float, base: Path) -> tuple[float, float]:
    """(detection, recovery) seconds of one job losing node2 by `kind`."""
    args = ["--f", "1", "--steps", "8", "--global-batch", "16", "--dtype", "float64", "--pipelines", "2,2",
            "--timeout", "30", "--heartbeat-timeout", str(heartbeat_s), "--heartbeat-interval", "0.25", "--json"]  # fmt: skip
    if kind == "crash":
        args += ["--inject", "1:node2:crash:forward"]
    with NetCluster(5) as cluster:
        job = NetJob(cluster, base / f"{kind}-{heartbeat_s:g}", 4, args)
        job.start()
        job.wait_for("training_started", timeout_s=120)
        detection = 0.0
        if kind == "cut":
            time.sleep(0.3)
            cluster.cut(3)
            detection = job.wait_for("worker_lost", timeout_s=120)
        code, summary = job.finish(timeout_s=240)
        if code != 0 or summary.get("status") != "finished" or not summary.get("recovery_s"):
            raise RuntimeError(f"{kind} at heartbeat {heartbeat_s:g} s did not recover: {job.tail()}")
        return detection, float(summary["recovery_s"][0])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeouts", default="2,4,8", help="heartbeat timeouts, seconds")
    parser.add_argument("--out", default=None, help="write the figure here (PNG)")
    args = parser.parse_args(argv)
    reason = unavailable()
    if reason is not None:
        print(f"netns_recovery: {reason}", file=sys.stderr)
        return 2
    timeouts = [float(x) for x in args.timeouts.split(",")]
    rows = []
    with tempfile.TemporaryDirectory(prefix="ooblab-netns-") as tmp:
        for heartbeat_s in timeouts:
            for kind in ("cut", "crash"):
                detection, recovery = run_one(kind, heartbeat_s, Path(tmp))
                rows.append((heartbeat_s, kind, detection, recovery))
                print(f"heartbeat timeout {heartbeat_s:4.1f} s  {kind:5}  detection {detection:5.2f} s  "
                      f"recovery {recovery:5.2f} s  total {detection + recovery:5.2f} s", flush=True)  # fmt: skip
    if args.out:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 3.6), layout="constrained")
        for kind, marker in (("cut", "o"), ("crash", "s")):
            xs = [r[0] for r in rows if r[1] == kind]
            ax.plot(
                xs,
                [r[2] + r[3] for r in rows if r[1] == kind],
                marker=marker,
                label="link cut" if kind == "cut" else "process crash",
            )
        ax.plot(timeouts, timeouts, ls=":", color="0.5", label="the heartbeat timeout")
        ax.set_xlabel("heartbeat timeout (s)")
        ax.set_ylabel("fault to recovered (s)")
        ax.set_title("4 namespace hosts, 2 pipelines of 2, node2 lost")
        ax.legend()
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(args.out, dpi=110)
        print(f"figure: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
