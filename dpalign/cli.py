"""The ``dpalign`` command. The only module that parses arguments or prints to the terminal."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from contextlib import ExitStack

from . import __version__
from .errors import DpalignError

log = logging.getLogger("dpalign")

EXIT_ERROR = 1  # bad input or options
EXIT_USAGE = 2  # argparse's own
EXIT_INTERRUPTED = 130


# --------------------------------------------------------------------------------------------
# shared helpers
# --------------------------------------------------------------------------------------------


class _Formatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return f"dpalign: {record.levelname.lower()}: {record.getMessage()}"


def _setup_logging(verbose: int) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Formatter())
    root = logging.getLogger("dpalign")
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose > 1 else logging.INFO if verbose else logging.WARNING)
    root.propagate = False


def _progress_bar(total_cells: int, enabled: bool | None, label: str):
    """A tqdm bar counting cells (None when disabled); call it with cells done."""
    from . import config

    if enabled is False or (
        enabled is None and (not sys.stderr.isatty() or total_cells < config.PROGRESS_MIN_CELLS)
    ):
        return None
    from tqdm import tqdm

    return tqdm(
        total=total_cells,
        unit="cell",
        unit_scale=True,
        desc=label,
        file=sys.stderr,
        leave=False,
        smoothing=0.1,
    )


def _write_outputs(outputs: dict[str, str]) -> None:
    """Write every (path -> text) atomically; '-' is standard output. All or nothing."""
    from .io import atomic_output

    with ExitStack() as stack:
        handles = {}
        for path, _ in outputs.items():
            if path != "-":
                handles[path] = stack.enter_context(atomic_output(path))
        for path, text in outputs.items():
            if path == "-":
                continue
            handles[path].write(text)
    if "-" in outputs:
        sys.stdout.write(outputs["-"])
        sys.stdout.flush()


def _check_outputs(paths: list[str | None]) -> None:
    """Fail before the work, not after it, when an output cannot be written."""
    import os
    from pathlib import Path

    named = [p for p in paths if p and p != "-"]
    if len(set(named)) != len(named):
        raise DpalignError("two outputs (--out, --placements, --report) name the same file")
    for path in named:
        folder = Path(path).parent
        if not folder.is_dir():
            raise DpalignError(f"{path}: the folder {folder} does not exist")
        if not os.access(folder, os.W_OK):
            raise DpalignError(f"{path}: cannot write in {folder}")
        if Path(path).is_dir():
            raise DpalignError(f"{path} is a folder")


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-v", "--verbose", action="count", default=0, help="say more (-vv: debugging detail)"
    )


def _add_backend(parser: argparse.ArgumentParser, choices: list[str]) -> None:
    parser.add_argument(
        "--backend",
        default="auto",
        choices=choices,
        help="where the kernels run (default: auto, the fastest available)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        metavar="N",
        help="CPU worker threads (default: one per core)",
    )
    parser.add_argument(
        "--progress",
        dest="progress",
        action="store_true",
        default=None,
        help="always show a progress bar",
    )
    parser.add_argument(
        "--no-progress", dest="progress", action="store_false", help="never show a progress bar"
    )
    parser.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="run on an existing Dask cluster (tcp://host:8786); implies --backend dask",
    )
    parser.add_argument(
        "--dask-workers",
        type=int,
        metavar="N",
        help="start a local Dask cluster of N worker processes for the run; implies --backend dask",
    )
    parser.add_argument(
        "--report",
        metavar="FILE.json",
        help="write the run's accounting (phases, workers, GCUPS) as JSON",
    )


def _backend_from_args(args):
    """The backend the options ask for (Dask when a scheduler or worker count is given)."""
    from .engine import get_backend

    device = getattr(args, "device", None)
    if args.scheduler or args.dask_workers:
        if args.backend not in ("auto", "dask"):
            raise DpalignError(
                f"--scheduler/--dask-workers run on Dask; drop --backend {args.backend}"
            )
        return get_backend("dask", scheduler=args.scheduler, workers=args.dask_workers)
    if device is not None:
        if args.backend == "opencl":
            return get_backend("opencl", device=device)
        if args.backend in ("hybrid", "auto"):
            return get_backend("hybrid", threads=args.threads, devices=[device])
        raise DpalignError(f"--device applies to --backend opencl or hybrid, not {args.backend}")
    return get_backend(args.backend, threads=args.threads)


def _worker_summary(stats) -> str:
    """The split between workers when there are several (``; split: 16 CPU workers 38% ...``)."""
    data = stats.as_dict()["workers"]
    if len(data) < 2:
        return ""
    cpu = [w for w in data if w["name"].startswith("cpu-")]
    parts = []
    if cpu:
        cells = sum(w["cells"] for w in cpu)
        busiest = max(w["kernel_seconds"] for w in cpu)
        rate = cells / busiest / 1e9 if busiest else 0.0
        parts.append(
            f"{len(cpu)} CPU workers {sum(w['share'] for w in cpu):.0%} ({rate:.1f} GCUPS)"
        )
    for w in data:
        if not w["name"].startswith("cpu-"):
            parts.append(f"{w['name']} {w['share']:.0%} ({w['gcups']:.1f} GCUPS)")
    return "; split: " + ", ".join(parts)


# --------------------------------------------------------------------------------------------
# dpalign papara
# --------------------------------------------------------------------------------------------


def _add_papara(sub) -> None:
    p = sub.add_parser(
        "papara",
        help="align reads to a reference alignment and tree (PaPaRa 2.5 compatible)",
        description="Place reads into a reference MSA using its phylogeny (PaPaRa 2.5). "
        "--format phylip output is byte-identical to PaPaRa's papara_alignment.*, "
        "--format fasta to its -g output.",
    )
    p.add_argument("--ref", required=True, metavar="TREE", help="reference tree (Newick)")
    p.add_argument(
        "--msa", required=True, metavar="MSA", help="reference alignment (FASTA or relaxed PHYLIP)"
    )
    p.add_argument("--reads", metavar="FASTA", help="reads to align (FASTA)")
    p.add_argument("--out", default="-", metavar="FILE", help="output file (default: stdout)")
    p.add_argument("--format", default="phylip", choices=["phylip", "fasta"])
    p.add_argument(
        "--no-ref-gaps",
        action="store_true",
        help="drop inserted read characters instead of adding gap columns "
        "to the reference (PaPaRa -r)",
    )
    p.add_argument(
        "--gap-model",
        default="likelihood",
        choices=["likelihood", "cgap"],
        help="gap flags per edge: likelihood (default) or cgap (PaPaRa -c)",
    )
    p.add_argument(
        "--scoring",
        default="papara2",
        metavar="SCHEME",
        help="papara2 (default), bmc2012, or o:e:m:mc such as -3:-1:2:-3",
    )
    p.add_argument("--protein", action="store_true", help="protein data (PaPaRa -a)")
    p.add_argument(
        "--placements",
        metavar="FILE",
        help="also write a TSV: read, best edge, the edge's smaller clade, score",
    )
    _add_backend(p, ["auto", "numba", "reference", "opencl", "hybrid", "dask"])
    p.add_argument(
        "--device",
        metavar="DEVICE",
        help="OpenCL device for --backend opencl/hybrid: an id shown by 'dpalign devices' "
        "(0:1), gpu, cpu, or part of its name (default: $DPALIGN_OPENCL_DEVICE, else the first "
        "GPU, else the first CPU device)",
    )
    _add_common(p)
    p.set_defaults(run=_run_papara)


def _run_papara(args) -> int:
    from .gcups import gcups
    from .papara import papara

    _check_outputs([args.out, args.placements, args.report])
    backend = _backend_from_args(args)
    start = time.perf_counter()
    bar = None

    def progress(cells: int, total: int) -> None:
        nonlocal bar
        if bar is None:
            bar = _progress_bar(total, args.progress, "scoring") or False
        if bar:
            bar.update(cells)

    result = papara(
        args.ref,
        args.msa,
        args.reads,
        protein=args.protein,
        gap_model=args.gap_model,
        scoring=args.scoring,
        ref_gaps=not args.no_ref_gaps,
        backend=backend,
        progress=progress,
    )
    if bar:
        bar.close()
    s, stats = result.settings, result.stats
    elapsed = time.perf_counter() - start
    outputs = {args.out: result.to_phylip() if args.format == "phylip" else result.to_fasta()}
    if args.placements:
        outputs[args.placements] = result.placements_tsv()
    if args.report:
        report = {"command": "papara", "settings": s, "seconds": elapsed, **stats.as_dict()}
        outputs[args.report] = json.dumps(report, indent=2) + "\n"
    _write_outputs(outputs)
    print(
        f"dpalign papara: {s['reads']} reads x {s['edges']} edges x {s['columns']} columns = "
        f"{s['cells']:.3e} cells; scoring {stats.phases.get('scoring', 0):.2f} s "
        f"({stats.phase_gcups('scoring'):.3g} GCUPS), whole run {elapsed:.2f} s "
        f"({gcups(s['cells'], elapsed):.3g} GCUPS) on {s['backend']}" + _worker_summary(stats),
        file=sys.stderr,
    )
    return 0


# --------------------------------------------------------------------------------------------
# dpalign devices
# --------------------------------------------------------------------------------------------


def _add_devices(sub) -> None:
    p = sub.add_parser("devices", help="list the CPU and every OpenCL device")
    p.add_argument("--json", action="store_true", help="print JSON")
    _add_common(p)
    p.set_defaults(run=_run_devices)


def _run_devices(args) -> int:
    from .devices import describe_devices

    info = describe_devices()
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    cpu = info["cpu"]
    print(
        f"CPU: {cpu['name']}, {cpu['cores']} cores, SIMD {cpu['simd']} "
        f"({cpu['int16_lanes']} x int16 lanes as Numba sees it)"
    )
    if info["opencl_error"]:
        print(f"OpenCL: {info['opencl_error']}")
    for dev in info["opencl"]:
        features = "".join(f", {f}" for f in dev.get("features", []))
        chosen = " [--backend opencl uses this one]" if dev.get("chosen") else ""
        print(
            f"OpenCL {dev['id']}: {dev['name']} ({dev['type']}, {dev['platform']}), "
            f"{dev['compute_units']} compute units, {dev['global_mem_gib']:.1f} GiB global, "
            f"{dev['local_mem_kib']:.0f} KiB local{features}{chosen}"
        )
    print("Backends available: " + ", ".join(info["backends"]))
    return 0


# --------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dpalign",
        description="Dynamic-programming alignment kernels: PaPaRa, Needleman-Wunsch, "
        "Smith-Waterman, semi-global; Numba on CPUs, OpenCL on GPUs.",
    )
    parser.add_argument("--version", action="version", version=f"dpalign {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in _SUBCOMMANDS:
        add(sub)
    return parser


_SUBCOMMANDS = [_add_papara, _add_devices]


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _setup_logging(args.verbose)
    try:
        return args.run(args)
    except DpalignError as exc:
        print(f"dpalign: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("dpalign: interrupted; no output was written", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        sys.stderr.close()
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
