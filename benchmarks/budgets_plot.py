"""Plot the budget policy's decisions per tick from a ``spark_budgets`` report.

Run by the plot virtualenv's Python (it needs only matplotlib):
``python budgets_plot.py REPORT.json OUT.png``. Three panels over the run's time: rows read
per tick against the read limit, active partitions and slot moves, and the fullest
partition's state against the budget (the controller's and the best fixed setting's).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def main(report_path: Path, png: Path) -> None:
    """Draw the controller's ticks of the report, write ``png``."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    report: dict[str, Any] = json.loads(report_path.read_text())
    part = report["simulated"]
    ticks = part["controller_ticks"]
    t = [x["end_s"] for x in ticks]
    fig, axes = plt.subplots(3, 1, figsize=(9, 8), sharex=True)
    rows, active, memory = axes
    rows.step(t, [x["rows"] for x in ticks], where="pre", label="rows read")
    rows.step(t, [x["limit"] for x in ticks], where="pre", label="read limit", alpha=0.8)
    rows.set_yscale("log")
    rows.set_ylabel("rows per tick")
    rows.legend(loc="upper right")
    active.step(t, [x["active"] for x in ticks], where="pre", label="active partitions")
    active.bar(t, [x["moves"] for x in ticks], width=0.2, color="#e4572e", label="slot moves")
    active.set_ylabel("partitions / moves")
    active.legend(loc="upper right")
    budget = part["budget_bytes"]
    mb = 1e6
    memory.plot(t, [x["peak_partition_bytes"] / mb for x in ticks], label="controller")
    best = part.get("best_fixed_ticks") or []
    if best:
        name = part["ratios"].get("best_fixed_overall", "best fixed")
        memory.plot(
            [x["end_s"] for x in best],
            [x["peak_partition_bytes"] / mb for x in best],
            label=name,
            alpha=0.7,
        )
    memory.axhline(budget / mb, color="black", linestyle="--", label="budget")
    memory.set_ylabel("fullest partition's state, MB")
    memory.set_xlabel("seconds")
    memory.legend(loc="upper right")
    work = part["workload"]
    burst, hot = work["burst"], work["hot"]
    for ax in axes:
        ax.axvspan(*burst, color="#f4d35e", alpha=0.25)
        ax.axvspan(*hot, color="#2e86ab", alpha=0.08)
    fig.suptitle(
        f"budget policy, simulated: {work['burst_factor']:g}x burst (yellow) "
        f"and hot key range (blue)"
    )
    fig.tight_layout()
    fig.savefig(png, dpi=110)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
