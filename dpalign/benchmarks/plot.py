"""GCUPS plots of the PaPaRa kernel: against reference length and against read count.

One line per dpalign backend; the seed paper's figures drawn as reference points (i7-2600 on
four cores, by reference length; GTX 560 peak and average as horizontal lines).
"""

from __future__ import annotations

from collections import defaultdict

from . import workloads


def plot(results, path) -> None:
    """Write a PNG with two panels (Table 1 and Table 2 shapes) from benchmark results."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = {1: defaultdict(list), 2: defaultdict(list)}
    for r in results:
        table = r.params.get("table")
        if r.kernel == "papara" and table in series:
            x = r.params["ref_length"] if table == 1 else r.params["reads"]
            series[table][r.engine].append((x, r.gcups))
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    titles = {
        1: "GCUPS against reference length (320 profiles)",
        2: "GCUPS against number of reads (reference length 5,000)",
    }
    labels = {1: "reference length (columns)", 2: "reads"}
    for table, ax in zip((1, 2), axes, strict=True):
        for engine, points in sorted(series[table].items()):
            points.sort()
            ax.plot(
                [p[0] for p in points],
                [p[1] for p in points],
                marker="o",
                label=f"dpalign {engine}",
            )
        ax.axhline(
            workloads.SEED_GTX560_PEAK,
            color="gray",
            linestyle="--",
            linewidth=1,
            label=f"seed GTX 560 peak ({workloads.SEED_GTX560_PEAK})",
        )
        ax.axhline(
            workloads.SEED_GTX560_AVERAGE,
            color="gray",
            linestyle=":",
            linewidth=1,
            label=f"seed GTX 560 average ({workloads.SEED_GTX560_AVERAGE})",
        )
        if table == 1:
            xs, ys = zip(*workloads.SEED_I7_BY_REFERENCE_LENGTH, strict=True)
            ax.plot(
                xs,
                ys,
                linestyle="none",
                marker="s",
                color="black",
                label="seed i7-2600, 4 cores (SSE)",
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(labels[table])
        ax.set_ylabel("GCUPS")
        ax.set_title(titles[table], fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("dpalign PaPaRa scoring kernel")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
