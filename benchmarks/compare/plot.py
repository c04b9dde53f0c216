"""Plot a comparison report: one panel per workload (log scale; median bar, every run a dot).

Word count variants in words/s, the gaps variants in events/s, each panel with its input in
its title. Run by the plot virtualenv's Python (it needs only matplotlib):
``python plot.py REPORT.json OUT.png``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

#: Bar colours by the variant name's first word.
COLORS = {
    "flamestream": "#e4572e",
    "plain": "#2e86ab",
    "pyspark": "#2e86ab",
    "counter": "#4c9f38",
}


def panels(report: dict[str, Any]) -> list[tuple[str, str, list[str], str]]:
    """Per workload with a measured variant: (title, unit, its variants, x label)."""
    found = []
    size, events = report.get("input"), report.get("events_input")
    for workload, unit, made in (("word count", "words", size), ("gaps", "events", events)):
        names = [
            n
            for n, v in report["variants"].items()
            if report.get("workloads", {}).get(n, "word count") == workload
            and v.get(f"{unit}_per_second")
        ]
        if not names or made is None:
            continue
        if workload == "word count":
            title = (
                f"word count, {made['lines']:,} lines / {made['words']:,} Zipf words in "
                f"{made['files']} files"
            )
        else:
            title = (
                f"gaps between a key's events, {made['events']:,} events of {made['keys']:,} "
                f"keys in {made['files']} files"
            )
        failed = [
            n
            for n, v in report["variants"].items()
            if report.get("workloads", {}).get(n, "word count") == workload and not v["runs"]
        ]
        if failed:  # a variant that failed has no bar: say so where its bar would be
            title += f"\nnot run (see the report's errors): {', '.join(failed)}"
        found.append((title, unit, names, f"{unit} per second, log scale"))
    return found


def draw(ax: Any, report: dict[str, Any], unit: str, names: list[str]) -> None:
    """One panel: a bar per variant (its median rate), a dot per run."""
    total = (report["input"] if unit == "words" else report["events_input"])[unit]
    medians = [report["variants"][n][f"{unit}_per_second"] for n in names]
    colors = [COLORS.get(n.split("_")[0], "#888888") for n in names]
    bars = ax.barh(names, medians, color=colors, alpha=0.85)
    for i, name in enumerate(names):
        rates = [total / r["seconds"] for r in report["variants"][name]["runs"]]
        ax.plot(rates, [i] * len(rates), "o", color="black", markersize=3)
    labels = [f"{m / 1e6:.2f} M" if m >= 1e6 else f"{m / 1e3:.0f} k" for m in medians]
    ax.bar_label(bars, labels=labels, padding=4)
    ax.invert_yaxis()
    ax.set_xscale("log")  # the variants span two orders of magnitude
    ax.margins(x=0.3)


def main(report_path: Path, png: Path) -> None:
    """Draw the report's workloads as panels of horizontal bars, write ``png``."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    report: dict[str, Any] = json.loads(report_path.read_text())
    found = panels(report)
    if not found:
        msg = "plot: no variant of the report has a median rate to draw"
        raise SystemExit(msg)
    heights = [0.6 * len(names) + 1.4 for _, _, names, _ in found]
    fig, axes = plt.subplots(
        len(found),
        1,
        figsize=(8, sum(heights) + 0.4),
        gridspec_kw={"height_ratios": heights},
        squeeze=False,
    )
    for ax, (title, unit, names, label) in zip(axes[:, 0], found, strict=True):
        draw(ax, report, unit, names)
        ax.set_xlabel(label + " (median bar, each run a dot)")
        ax.set_title(title, fontsize=10)
    fig.suptitle(
        f"median of {report['rounds']} round(s), {report['machine']['cpus']} CPUs", fontsize=10
    )
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=120)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
