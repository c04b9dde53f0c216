"""Plot a comparison report: words/s per variant (log scale; median bar, every run a dot).

Run by the plot virtualenv's Python (it needs only matplotlib):
``python plot.py REPORT.json OUT.png``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

#: Bar colours by the variant name's first word.
COLORS = {"flamestream": "#e4572e", "plain": "#2e86ab", "counter": "#4c9f38"}


def main(report_path: Path, png: Path) -> None:
    """Draw the report's variants as horizontal bars of words/s, write ``png``."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    report: dict[str, Any] = json.loads(report_path.read_text())
    words = report["input"]["words"]
    names = [n for n, v in report["variants"].items() if v["words_per_second"]]
    medians = [report["variants"][n]["words_per_second"] for n in names]
    fig, ax = plt.subplots(figsize=(8, 0.6 * len(names) + 1.6))
    colors = [COLORS.get(n.split("_")[0], "#888888") for n in names]
    bars = ax.barh(names, medians, color=colors, alpha=0.85)
    for i, name in enumerate(names):
        rates = [words / r["seconds"] for r in report["variants"][name]["runs"]]
        ax.plot(rates, [i] * len(rates), "o", color="black", markersize=3)
    ax.bar_label(bars, labels=[f"{m / 1e6:.2f} M" for m in medians], padding=4)
    ax.invert_yaxis()
    ax.set_xscale("log")  # the variants span two orders of magnitude
    ax.set_xlabel("words per second, log scale (median bar, each run a dot)")
    size = report["input"]
    ax.set_title(
        f"word count, {size['lines']:,} lines / {words:,} Zipf words in {size['files']} files,\n"
        f"median of {report['rounds']} round(s), {report['machine']['cpus']} CPUs",
        fontsize=10,
    )
    ax.margins(x=0.3)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=120)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
