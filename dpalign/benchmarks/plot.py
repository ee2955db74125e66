"""GCUPS plots of the PaPaRa kernel: against reference length and against read count.

One line per dpalign backend; the seed paper's figures drawn as reference points (i7-2600 on
four cores, by reference length; GTX 560 peak and average as horizontal lines).
"""

from __future__ import annotations

import os
import tempfile
from collections import defaultdict
from pathlib import Path

from ..errors import OptionError
from . import workloads


def check() -> None:
    """Raise :class:`~dpalign.errors.OptionError` unless matplotlib imports (call it before
    benchmarking, so a missing plotter costs nothing)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot  # noqa: F401
    except ImportError as exc:
        raise OptionError(
            f"plotting needs matplotlib, which does not import here ({exc}); "
            "pip install matplotlib (or dpalign[bench])"
        ) from None


def _short(value: float) -> str:
    """A tick label: 500, 2k, 50k (not 10^3 or 2x10^3)."""
    if value >= 1_000:
        return f"{value / 1_000:g}k"
    return f"{value:g}"


def plot(results, path) -> None:
    """Write a PNG with two panels (Table 1 and Table 2 shapes) from benchmark results.

    The file appears whole or not at all (written beside ``path``, then renamed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, NullLocator

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
        # x: log scale, ticked at the measured (and seed) points; y: linear from 0
        ax.set_xscale("log")
        xs = {x for points in series[table].values() for x, _ in points}
        if table == 1:
            xs |= {x for x, _ in workloads.SEED_I7_BY_REFERENCE_LENGTH}
        xs = sorted(xs)
        ax.xaxis.set_major_locator(FixedLocator(xs))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticklabels([_short(x) for x in xs])
        top = max(
            [workloads.SEED_GTX560_PEAK] + [y for pts in series[table].values() for _, y in pts]
        )
        ax.set_ylim(0, top * 1.15)
        if not series[table]:
            ax.text(0.5, 0.5, "no dpalign results", transform=ax.transAxes, ha="center")
        ax.set_xlabel(labels[table])
        ax.set_ylabel("GCUPS")
        ax.set_title(titles[table], fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("dpalign PaPaRa scoring kernel")
    fig.tight_layout()
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            fig.savefig(handle, format="png", dpi=110)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 would outlive the rename
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    finally:
        plt.close(fig)
