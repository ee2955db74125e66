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
        twice = sorted({p for p in named if named.count(p) > 1})
        raise DpalignError(f"two outputs name the same file: {', '.join(twice)}")
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
    from .papara import PHASES, papara

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
    _write_papara(args, result, start)
    elapsed = time.perf_counter() - start
    phases = ", ".join(
        f"{label} {stats.phases[key]:.2f} s" for key, label in PHASES.items() if key in stats.phases
    )
    print(
        f"dpalign papara: {s['reads']} reads x {s['edges']} edges x {s['columns']} columns = "
        f"{s['cells']:.3e} cells; scoring {stats.phases.get('scoring', 0):.2f} s "
        f"({stats.phase_gcups('scoring'):.3g} GCUPS), whole run {elapsed:.2f} s "
        f"({gcups(s['cells'], elapsed):.3g} GCUPS) on {s['backend']}"
        + _worker_summary(stats)
        + f"; phases: {phases}",
        file=sys.stderr,
    )
    return 0


def _write_papara(args, result, start: float) -> None:
    """Stream the alignment (and the placements, the report) to their files, all or none."""
    from .io import atomic_output
    from .papara import PHASES

    stats = result.stats
    with ExitStack() as stack:
        with stats.phase("write"):
            if args.out == "-":
                sys.stdout.flush()
                result.write(sys.stdout.buffer, args.format)
            else:
                result.write(stack.enter_context(atomic_output(args.out, binary=True)), args.format)
            if args.placements:
                result.write_placements(stack.enter_context(atomic_output(args.placements)))
        log.info("%s: %.2f s", PHASES["write"], stats.phases["write"])
        if args.report:
            report = {
                "command": "papara",
                "settings": result.settings,
                "seconds": time.perf_counter() - start,
                "phase_names": PHASES,
                **stats.as_dict(),
            }
            stack.enter_context(atomic_output(args.report)).write(
                json.dumps(report, indent=2) + "\n"
            )
    if args.out == "-":
        sys.stdout.flush()


# --------------------------------------------------------------------------------------------
# dpalign bench
# --------------------------------------------------------------------------------------------


def _add_bench(sub) -> None:
    p = sub.add_parser(
        "bench",
        help="GCUPS benchmarks of the kernels, with peer tools side by side",
        description="Run a benchmark suite on the chosen backends and print cells, seconds "
        "and GCUPS per case, with parasail, pyopal, Biopython and scikit-bio on the same "
        "inputs (scores checked equal) when they are installed (pip install dpalign[bench]).",
    )
    p.add_argument(
        "--suite",
        default="quick",
        choices=["quick", "seed-tables", "search", "longpair", "all"],
        help="quick: a bit of everything in under two minutes on 2 cores; "
        "seed-tables: the seed paper's Tables 1 and 2 (PaPaRa kernel)",
    )
    p.add_argument(
        "--backend",
        default=None,
        metavar="LIST",
        help="comma-separated dpalign backends (default: numba, plus opencl when a GPU is present)",
    )
    p.add_argument(
        "--threads",
        type=_positive,
        default=None,
        metavar="N",
        help="CPU threads (default: one per core)",
    )
    p.add_argument(
        "--scale",
        type=_scale,
        default=1.0,
        help="multiply workload sizes (reads, database size, lengths)",
    )
    p.add_argument("--repeat", type=_positive, default=1, help="best of this many runs per case")
    p.add_argument("--no-peers", action="store_true", help="dpalign backends only")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    p.add_argument(
        "--plot",
        metavar="FILE.png",
        help="plot PaPaRa GCUPS against reference length and read count (needs matplotlib; "
        "suites quick, seed-tables, all)",
    )
    _add_common(p)
    p.set_defaults(run=_run_bench)


def _scale(text: str) -> float:
    """argparse type: a workload scale, a number above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, not {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number above 0, not {text}")
    return value


def _run_bench(args) -> int:
    from . import backends
    from .benchmarks import peers, suites
    from .devices import cpu_info

    # everything that can fail without benchmarking fails first
    if args.json == "-" or args.plot == "-":
        raise DpalignError("--json and --plot take a file name (the table goes to standard output)")
    _check_outputs([args.json, args.plot])
    if args.plot:
        from .benchmarks.plot import check

        if not args.plot.lower().endswith(".png"):
            raise DpalignError(f"--plot writes a PNG: name the file *.png, not {args.plot}")
        if args.suite not in suites.PLOTTED:
            raise DpalignError(
                f"--plot draws the PaPaRa kernel cases, which --suite {args.suite} does not run "
                f"(use {', '.join(suites.PLOTTED)})"
            )
        check()
    if args.backend is not None:
        chosen = tuple(dict.fromkeys(b.strip() for b in args.backend.split(",") if b.strip()))
        if not chosen:
            raise DpalignError(f"--backend names no backend (available: {', '.join(backends())})")
        unknown = [b for b in chosen if b not in backends()]
        if unknown:
            raise DpalignError(
                f"backend(s) not available here: {', '.join(unknown)} "
                f"(available: {', '.join(backends())})"
            )
    else:
        from .hybrid.backend import gpu_selectors

        chosen = ("numba", "opencl") if gpu_selectors() else ("numba",)
    settings = suites.Settings(
        args.suite, chosen, args.threads, args.scale, not args.no_peers, args.repeat
    )
    cpu = cpu_info()
    installed = [p for p in peers.PAIRWISE_PEERS if peers.available(p)]
    missing = [p for p in peers.PAIRWISE_PEERS if p not in installed]
    print(
        f"dpalign bench --suite {args.suite}: {cpu['name']}, {cpu['cores']} cores, "
        f"{cpu['simd']}; backends {', '.join(chosen)}; scale {args.scale}; peers "
        + (
            "off"
            if args.no_peers
            else (", ".join(installed) or "none")
            + (f" (not installed: {', '.join(missing)})" if missing else "")
        ),
        file=sys.stderr,
    )

    def show(result) -> None:
        print(
            f"  {result.kernel:<20} {result.engine:<10} {result.gcups:9.2f} GCUPS  "
            f"({result.shape})",
            file=sys.stderr,
        )

    results = suites.run_suite(settings, show)
    print(suites.table(results))
    sys.stdout.flush()
    differ = suites.disagreements(results)
    if args.json:
        payload = {
            "suite": args.suite,
            "cpu": cpu,
            "backends": list(chosen),
            "threads": args.threads,
            "scale": args.scale,
            "repeat": args.repeat,
            "peers": [] if args.no_peers else installed,
            "scores_equal": not differ,
            "results": [r.as_dict() for r in results],
        }
        _write_outputs({args.json: json.dumps(payload, indent=2) + "\n"})
    if args.plot:
        from .benchmarks.plot import plot

        plot(results, args.plot)
    if differ:
        print(
            "dpalign: warning: scores differ from dpalign's in "
            + ", ".join(f"{r.kernel} {r.engine} ({r.shape})" for r in differ)
            + ": a wrong scoring translation or a bug; the timings are not comparisons",
            file=sys.stderr,
        )
        return EXIT_ERROR
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
# dpalign align / dpalign search: shared scoring options
# --------------------------------------------------------------------------------------------

_GAP_HELP = (
    "a gap of length k costs OPEN + EXTEND*k (scikit-bio's convention, and BLAST's: its "
    "11/1 is --gap-open 11 --gap-extend 1; parasail's and pyopal's 'open' is OPEN + EXTEND). "
    "--gap-open 0 gives linear gaps (k*EXTEND)"
)


def _cost(text: str) -> int:
    """argparse type: a gap cost, a whole number >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a whole number, not {text!r} (dpalign scores in integers)"
        ) from None
    if value < 0:
        raise argparse.ArgumentTypeError(
            f"gap costs are positive numbers subtracted from the score, not {value}"
        )
    return value


def _whole(text: str) -> int:
    """argparse type: a (possibly negative) whole-number score."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a whole number, not {text!r} (dpalign scores in integers)"
        ) from None


def _positive(text: str) -> int:
    value = _whole(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number of at least 1, not {value}")
    return value


def _add_scoring(p: argparse.ArgumentParser, default_mode: str) -> None:
    p.add_argument(
        "--mode",
        default=default_mode,
        choices=["global", "local", "semiglobal"],
        help=f"global: Needleman-Wunsch with end gaps penalised; local: Smith-Waterman; "
        f"semiglobal: the query end to end, the target's ends free (default: {default_mode})",
    )
    sub = p.add_mutually_exclusive_group()
    sub.add_argument(
        "--matrix",
        metavar="NAME",
        help="substitution matrix known to scikit-bio (BLOSUM62, PAM250, NUC.4.4, ...)",
    )
    sub.add_argument("--match", type=_whole, default=None, metavar="M", help="match score (1)")
    p.add_argument("--mismatch", type=_whole, default=None, metavar="X", help="mismatch score (-1)")
    p.add_argument("--gap-open", type=_cost, default=0, metavar="OPEN", help=_GAP_HELP + " (0)")
    p.add_argument(
        "--gap-extend", type=_cost, default=2, metavar="EXTEND", help="see --gap-open (2)"
    )


def _scoring(args):
    from .errors import OptionError
    from .scoring import Scoring

    if args.matrix and args.mismatch is not None:
        raise OptionError("--mismatch goes with --match, not with --matrix")
    gap = args.gap_extend if args.gap_open == 0 else (args.gap_open, args.gap_extend)
    if args.matrix:
        return Scoring(args.matrix, gap)
    match = 1 if args.match is None else args.match
    mismatch = -1 if args.mismatch is None else args.mismatch
    return Scoring((match, mismatch), gap)


def _describe_scoring(scoring, mode: str) -> str:
    o, e = scoring.gap_open, scoring.gap_extend
    gaps = f"gap of k costs {o} + {e}k" if o else f"linear gaps, {e} per position"
    return f"mode {mode}, {scoring.sub_label}, {gaps}"


def _read_encoded(path, scoring):
    """Read a FASTA file (empty records allowed) and encode it; errors name file and line."""
    from .errors import InputError
    from .io import locate_in_fasta, read_fasta_allow_empty

    records = read_fasta_allow_empty(path)
    codes = []
    for rec in records:
        try:
            codes.append(scoring.encode(rec.seq, record=rec.name))
        except InputError as exc:
            line = locate_in_fasta(path, rec, exc.column) if exc.column else rec.line
            raise exc.located(path=str(path), line=line) from None
    return records, codes


def _span(start: int, end: int) -> tuple[int, int]:
    """0-based half-open to 1-based inclusive; an empty span prints as 0 0."""
    return (start + 1, end) if end > start else (0, 0)


# --------------------------------------------------------------------------------------------
# dpalign align
# --------------------------------------------------------------------------------------------


def _add_align(sub) -> None:
    p = sub.add_parser(
        "align",
        help="align every sequence of one FASTA file with every sequence of another",
        description="Pairwise alignment with traceback (scikit-bio's scores). Each record of "
        "A is aligned to each record of B. Coordinates in the pretty and cigar formats are "
        "1-based and inclusive (an empty local alignment prints 0 0); json gives the "
        "library's 0-based, half-open a_start/a_end/b_start/b_end.",
    )
    p.add_argument("a", metavar="A.fasta", help="first sequences (the query side)")
    p.add_argument("b", metavar="B.fasta", help="second sequences (the target side)")
    _add_scoring(p, "global")
    p.add_argument(
        "--format",
        default="pretty",
        choices=["pretty", "cigar", "fasta", "json"],
        help="pretty: the alignment in blocks; cigar: one tab-separated line per pair "
        "(a, b, score, a start, a end, b start, b end, CIGAR); fasta: the gapped pair; "
        "json: everything (default: pretty)",
    )
    p.add_argument(
        "--cigar", default="=X", choices=["=X", "M"], help="CIGAR operations (default: =X)"
    )
    p.add_argument("--out", default="-", metavar="FILE", help="output file (default: stdout)")
    p.add_argument(
        "--backend",
        default="auto",
        choices=["auto", "numba", "opencl", "reference"],
        help="numba: the traceback kernel (pairs over 40,000 cells: anti-diagonal tiles on "
        "every core, traceback in near-linear memory); opencl: those tiles on an OpenCL "
        "device; reference: the plain-Python oracle (default: auto, numba)",
    )
    p.add_argument(
        "--device",
        metavar="DEVICE",
        help="OpenCL device for --backend opencl (see 'dpalign devices'; default: "
        "$DPALIGN_OPENCL_DEVICE, else the first GPU, else the first CPU device)",
    )
    _add_common(p)
    p.set_defaults(run=_run_align)


def _pretty(name_a: str, name_b: str, aln, width: int = 60) -> str:
    top, bottom = aln.gapped()
    middle = "".join(
        "|" if x == y else ("." if "-" not in (x, y) else " ")
        for x, y in zip(top, bottom, strict=True)
    )
    a0, a1 = _span(aln.a_start, aln.a_end)
    b0, b1 = _span(aln.b_start, aln.b_end)
    label = max(len(name_a), len(name_b))
    out = [
        f"# {name_a} vs {name_b}: score {aln.score}, {aln.mode}; {name_a} {a0}-{a1}, "
        f"{name_b} {b0}-{b1}; CIGAR {aln.cigar or '(empty)'}\n"
    ]
    i, j = aln.a_start, aln.b_start
    for k in range(0, len(top), width):
        seg_a, seg_m, seg_b = top[k : k + width], middle[k : k + width], bottom[k : k + width]
        na = len(seg_a) - seg_a.count("-")
        nb = len(seg_b) - seg_b.count("-")
        pos = max(len(str(aln.a_end)), len(str(aln.b_end)))
        out.append(f"{name_a.ljust(label)} {str(i + 1).rjust(pos)} {seg_a} {i + na}\n")
        out.append(f"{' ' * label} {' ' * pos} {seg_m}\n")
        out.append(f"{name_b.ljust(label)} {str(j + 1).rjust(pos)} {seg_b} {j + nb}\n\n")
        i, j = i + na, j + nb
    if not top:
        out.append("\n")
    return "".join(out)


def _run_align(args) -> int:
    from .pairwise import align

    if args.device is not None and args.backend != "opencl":
        raise DpalignError(f"--device applies to --backend opencl, not {args.backend}")
    scoring = _scoring(args)
    recs_a, codes_a = _read_encoded(args.a, scoring)
    recs_b, codes_b = _read_encoded(args.b, scoring)
    results = []
    for ra, ca in zip(recs_a, codes_a, strict=True):
        for rb, cb in zip(recs_b, codes_b, strict=True):
            aln = align(
                ca,
                cb,
                args.mode,
                scoring=scoring,
                backend=args.backend,
                cigar=args.cigar,
                device=args.device,
            )
            results.append((ra.name, rb.name, aln))
    if args.format == "json":
        text = json.dumps(
            [{"a": na, "b": nb, **aln.as_dict()} for na, nb, aln in results], indent=2
        )
        text += "\n"
    elif args.format == "cigar":
        rows = []
        for na, nb, aln in results:
            a0, a1 = _span(aln.a_start, aln.a_end)
            b0, b1 = _span(aln.b_start, aln.b_end)
            rows.append(f"{na}\t{nb}\t{aln.score}\t{a0}\t{a1}\t{b0}\t{b1}\t{aln.cigar}\n")
        text = "".join(rows)
    elif args.format == "fasta":
        parts = []
        for na, nb, aln in results:
            top, bottom = aln.gapped()
            parts.append(f">{na} score={aln.score}\n{top}\n>{nb}\n{bottom}\n")
        text = "".join(parts)
    else:
        text = "".join(_pretty(na, nb, aln) for na, nb, aln in results)
    _write_outputs({args.out: text})
    log.info("%d alignments; %s", len(results), _describe_scoring(scoring, args.mode))
    return 0


# --------------------------------------------------------------------------------------------
# dpalign search
# --------------------------------------------------------------------------------------------


def _add_search(sub) -> None:
    p = sub.add_parser(
        "search",
        help="search a FASTA database with query sequences (BLAST-style tabular output)",
        description="Score every query against every database sequence with the SIMD "
        "kernels, trace back the best hits. Output: one tab-separated row per hit: query, "
        "target, score, query start, query end, target start, target end; coordinates are "
        "1-based and inclusive like BLAST's (an empty local alignment prints 0 0). A summary "
        "with the GCUPS achieved goes to standard error.",
    )
    p.add_argument("--query", required=True, metavar="FASTA", help="query sequences")
    p.add_argument("--db", required=True, metavar="FASTA", help="database sequences")
    _add_scoring(p, "local")
    p.add_argument(
        "--top", type=_positive, default=10, metavar="N", help="hits per query (default: 10)"
    )
    p.add_argument("--out", default="-", metavar="FILE", help="output file (default: stdout)")
    _add_backend(p, ["auto", "numba", "reference", "opencl", "hybrid"])
    _add_common(p)
    p.set_defaults(run=_run_search)


def _run_search(args) -> int:
    from .engine import get_backend
    from .gcups import gcups
    from .search import Database, search_many

    scoring = _scoring(args)
    backend = get_backend(args.backend, threads=args.threads)
    queries, q_codes = _read_encoded(args.query, scoring)
    targets, t_codes = _read_encoded(args.db, scoring)
    start = time.perf_counter()
    db = Database(t_codes, names=[r.name for r in targets], sub_score=scoring)
    cells = sum(len(q) for q in q_codes) * db.residues
    bar = _progress_bar(cells, args.progress, "searching")
    rows = []
    all_hits = search_many(
        q_codes,
        db,
        top=args.top,
        mode=args.mode,
        scoring=scoring,
        backend=backend,
        progress=bar.update if bar else None,
    )
    for rec, hits in zip(queries, all_hits, strict=True):
        for h in hits:
            q0, q1 = _span(h.query_start, h.query_end)
            t0, t1 = _span(h.target_start, h.target_end)
            rows.append(f"{rec.name}\t{h.target}\t{h.score}\t{q0}\t{q1}\t{t0}\t{t1}\n")
    if bar:
        bar.close()
    elapsed = time.perf_counter() - start
    _write_outputs({args.out: "".join(rows)})
    print(
        f"dpalign search: {len(queries)} queries x {len(db)} targets = {cells:.3e} cells in "
        f"{elapsed:.2f} s: {gcups(cells, elapsed):.2f} GCUPS on {backend.describe()} "
        f"({_describe_scoring(scoring, args.mode)})",
        file=sys.stderr,
    )
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


_SUBCOMMANDS = [_add_papara, _add_devices, _add_align, _add_search, _add_bench]


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
