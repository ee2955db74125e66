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
        # The library may attach the command line's wording (``cli_message``) to a record
        # whose own text speaks of the library (log levels rather than -v).
        message = getattr(record, "cli_message", None) or record.getMessage()
        return f"dpalign: {record.levelname.lower()}: {message}"


#: Library parameters whose command-line option is not ``--`` plus the name.
_OPTION_FOR = {"workers": "--dask-workers"}


def _cli_wording(exc: DpalignError) -> str:
    """The error as the command line says it: its option, not the library's parameter."""
    text = str(exc)
    parameter = getattr(exc, "parameter", None)
    if parameter and text.startswith(parameter):
        option = _OPTION_FOR.get(parameter, "--" + parameter.replace("_", "-"))
        text = option + text[len(parameter) :]
    return text


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


def _check_outputs(
    outputs: dict[str, str | None], inputs: dict[str, str | None] | None = None
) -> None:
    """Fail before the work, not after it, when an output cannot be written.

    ``outputs`` and ``inputs`` map an option (``--out``) to the path it names (``-``:
    standard output or input; None: not given). Refused: two outputs on standard output, two
    outputs on one file, an output that is one of the inputs (the same file, however named),
    a missing folder, a folder where nothing can be written, an output that is a folder.
    """
    import os
    from pathlib import Path

    on_stdout = [flag for flag, path in outputs.items() if path == "-"]
    if len(on_stdout) > 1:
        raise DpalignError(
            f"{' and '.join(on_stdout)} would {'both' if len(on_stdout) == 2 else 'all'} go to "
            "standard output, where they could not be told apart; name a file for "
            f"{'one of them' if len(on_stdout) == 2 else 'all but one'}"
        )
    named = {flag: path for flag, path in outputs.items() if path and path != "-"}
    seen: dict[str, str] = {}
    for flag, path in named.items():
        key = os.path.realpath(path)
        if key in seen:
            raise DpalignError(f"{seen[key]} and {flag} name the same file: {path}")
        seen[key] = flag
    probed: set[str] = set()
    for flag, path in named.items():
        target = Path(path)
        folder = target.parent
        if not folder.is_dir():
            raise DpalignError(f"{flag} {path}: the folder {folder} does not exist")
        if target.is_dir():
            raise DpalignError(f"{flag} {path} is a folder")
        if target.exists():
            for in_flag, in_path in (inputs or {}).items():
                if in_path and in_path != "-" and _same_file(path, in_path):
                    raise DpalignError(
                        f"{flag} {path} is also an input ({in_flag} {in_path}); writing it would "
                        "destroy that input: name another file"
                    )
        if str(folder.resolve()) not in probed:
            _probe_folder(flag, path, folder)
            probed.add(str(folder.resolve()))


def _same_file(a: str, b: str) -> bool:
    import os

    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _probe_folder(flag: str, path: str, folder) -> None:
    """Create and remove a file where the output will go: the one sure test that it can be
    written there (os.access says yes to root in /proc, and nothing of read-only mounts)."""
    import os
    import tempfile

    try:
        fd, probe = tempfile.mkstemp(prefix=".dpalign-probe.", dir=folder)
    except OSError as exc:
        raise DpalignError(f"{flag} {path}: cannot write in {folder} ({exc.strerror})") from None
    os.close(fd)
    os.unlink(probe)


def _cap_threads(args) -> None:
    """More threads than cores only slows the run (each core switches between threads):
    cap ``--threads`` at the cores this process may use, with a note."""
    cores = _cores()
    if args.threads is not None and args.threads > cores:
        log.warning(
            "--threads %d is more than the %d cores this process may use; using %d",
            args.threads,
            cores,
            cores,
        )
        args.threads = cores


def _cores() -> int:
    import os

    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-v", "--verbose", action="count", default=0, help="say more (-vv: debugging detail)"
    )


def _add_progress(parser: argparse.ArgumentParser, help_on: str) -> None:
    """``--progress`` / ``--no-progress`` into ``args.progress`` (None: on a terminal)."""
    parser.add_argument(
        "--progress", dest="progress", action="store_true", default=None, help=help_on
    )
    parser.add_argument(
        "--no-progress", dest="progress", action="store_false", help="never show a progress bar"
    )


def _add_backend(parser: argparse.ArgumentParser, choices: list[str], dask: bool = True) -> None:
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
        help="CPU worker threads (default: one per core; more than the cores are capped at them)",
    )
    _add_progress(parser, "always show a progress bar")
    if dask:
        parser.add_argument(
            "--scheduler",
            metavar="ADDRESS",
            help="run on an existing Dask cluster (tcp://host:8786); implies --backend dask",
        )
        parser.add_argument(
            "--dask-workers",
            type=_positive,
            metavar="N",
            help="start a local Dask cluster of N (at least 1) worker processes for the run; "
            "implies --backend dask",
        )
    parser.add_argument(
        "--report",
        metavar="FILE.json",
        help="write the run's accounting (phases, workers, GCUPS) as JSON",
    )


def _backend_from_args(args, cells: float | None = None, kernel: str = "pairwise"):
    """The backend the options ask for (Dask when a scheduler or worker count is given;
    ``auto`` for work of about ``cells`` cells of a kernel family as
    :func:`~dpalign.engine.auto_backend` picks)."""
    from .engine import auto_backend, backend_class, get_backend

    device = getattr(args, "device", None)
    _cap_threads(args)
    kind = "auto" if args.backend == "auto" else backend_class(args.backend).kind
    scheduler = getattr(args, "scheduler", None)
    workers = getattr(args, "dask_workers", None)
    if scheduler or workers is not None:
        if kind not in ("auto", "cluster"):
            raise DpalignError(
                f"--scheduler/--dask-workers run on Dask; drop --backend {args.backend}"
            )
        return get_backend("dask", scheduler=scheduler, workers=workers)
    if device is not None:
        if kind == "device":
            return get_backend(args.backend, device=device)
        if kind in ("pool", "auto"):
            pool = "hybrid" if kind == "auto" else args.backend
            return get_backend(pool, threads=args.threads, devices=[device])
        raise DpalignError(f"--device applies to --backend opencl or hybrid, not {args.backend}")
    if kind == "auto" and cells is not None:
        return auto_backend(cells, args.threads, kernel)
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
    p.add_argument(
        "--format",
        default=None,
        choices=["phylip", "fasta"],
        help="the alignment's format, to any --out name (default: fasta when the --out name "
        f"ends in {', '.join(_FASTA_SUFFIXES)}, else phylip)",
    )
    p.add_argument(
        "--split-out",
        metavar="DIR",
        help="also write DIR/reference.fasta and DIR/query.fasta, exactly as "
        "'epa-ng --split MSA OUT' would cut them from the whole output (rows named in --msa, "
        "then the others; upper case, 80 columns a line); DIR is made if missing",
    )
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
        help="papara2 (default), bmc2012, or o:e:m:mc[:mm] such as -3:-1:2:-3 (mm: a mismatch "
        "score, 0 in PaPaRa; '--scoring -3:-1:2:-3' and '--scoring=-3:-1:2:-3' alike)",
    )
    p.add_argument("--protein", action="store_true", help="protein data (PaPaRa -a)")
    p.add_argument(
        "--accurate",
        action="store_true",
        help="the accurate mode, not PaPaRa 2.5's output: a mismatch score (so unrelated read "
        "ends become insertions instead of being pulled into columns), N/X kept in reads, and a "
        "second pass that re-aligns each read against its edge's residue and gap frequencies "
        "and its two nearest reference rows; "
        "--scoring then defaults to the tuned dpalign.scoring.ACCURATE",
    )
    p.add_argument(
        "--placements",
        metavar="FILE",
        help="also write a TSV: read, best edge, the edge's smaller clade, score, second-best "
        "edge, its score, edges tied at the best score, support (README)",
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
    import os

    from .gcups import gcups
    from .papara import PHASES, papara

    if args.split_out == "-":
        raise DpalignError("--split-out names a folder for two files, not standard output")
    split = _split_paths(args.split_out)
    split_checked = split if args.split_out and os.path.isdir(args.split_out) else {}
    _check_outputs(
        {
            "--out": args.out,
            "--placements": args.placements,
            "--report": args.report,
            **split_checked,
        },
        {"--ref": args.ref, "--msa": args.msa, "--reads": args.reads},
    )
    fmt = args.format or _format_from_name(args.out)
    start = time.perf_counter()
    built = []
    dask = getattr(args, "scheduler", None) or getattr(args, "dask_workers", None) is not None
    cells = _papara_cells(args)
    cores_name = None  # auto's choice for small work (the CPU backend), known before it is built
    if args.backend == "auto" and not dask and getattr(args, "device", None) is None and cells:
        from .engine import cores_suffice, cpu_backend

        if cores_suffice(cells, "papara", args.threads):
            cores_name = cpu_backend(args.threads).name

    def backend():  # built on papara()'s warm-up thread while the inputs are read
        built.append(_backend_from_args(args, cells, "papara"))
        return built[-1]

    # what papara() knows of the backend before it is built (whether a device may compute
    # the edge profiles; Dask's workers run elsewhere)
    backend.backend_name = "dask" if dask else cores_name or args.backend

    bar = None

    def progress(cells: int, total: int) -> None:
        nonlocal bar
        if bar is None:
            bar = _progress_bar(total, args.progress, "scoring") or False
        if bar:
            bar.update(cells)

    from .papara.dataset import no_collection

    with ExitStack() as alignment:
        # No cyclic garbage collection until the files are written: a full pass over the
        # run's objects stalled it for tens of milliseconds now and then.
        alignment.enter_context(no_collection())
        # Without reference gaps the rows are final as each batch is traced back: they go to
        # the file (whole or not at all, as ever) while the device scores the next batch.
        stream = None
        if args.no_ref_gaps and args.out != "-":
            from .io import atomic_output

            stream = (alignment.enter_context(atomic_output(args.out, binary=True)), fmt)
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
            accurate=args.accurate,
            stream=stream,
        )
        if bar:
            bar.close()
        s, stats = result.settings, result.stats
        _write_papara(args, result, start, fmt, split, streamed=stream is not None)
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
    _DONE_WITH_NOTHING_OPEN[0] = all(b.kind != "cluster" for b in built)
    if _SERVING[0]:  # a server goes on: a work queue's device processes end with the command
        for b in built:
            close = getattr(b, "close", None)
            if close is not None:
                close()
    return 0


_FASTA_SUFFIXES = (".fasta", ".fa", ".fas", ".fna", ".faa", ".afa")


def _format_from_name(path: str) -> str:
    """fasta for an --out name with a FASTA extension, else PaPaRa's phylip."""
    return "fasta" if path.lower().endswith(_FASTA_SUFFIXES) else "phylip"


def _split_paths(folder: str | None) -> dict[str, str]:
    """The two files of --split-out. The folder may be missing if its parent is there (it
    is made after the work); where it exists, its two files are checked like any output."""
    import os

    if folder is None:
        return {}
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise DpalignError(f"--split-out {folder} is a file, not a folder")
    if not os.path.isdir(folder):
        parent = os.path.dirname(os.path.abspath(folder))
        if not os.path.isdir(parent):
            raise DpalignError(f"--split-out {folder}: the folder {parent} does not exist")
        _probe_folder("--split-out", folder, parent)
    return {
        "--split-out reference": os.path.join(folder, "reference.fasta"),
        "--split-out query": os.path.join(folder, "query.fasta"),
    }


def _write_papara(
    args, result, start: float, fmt: str, split: dict, streamed: bool = False
) -> None:
    """Stream the alignment (and the placements, the split files, the report) to their files,
    all or none (``streamed``: the alignment went to its file during the run)."""
    import os

    from .io import atomic_output
    from .papara import PHASES

    stats = result.stats
    with ExitStack() as stack:
        with stats.phase("write"), stats.span("write"):
            if args.out == "-":
                sys.stdout.flush()
                result.write(sys.stdout.buffer, fmt)
            elif not streamed:
                result.write(stack.enter_context(atomic_output(args.out, binary=True)), fmt)
            if args.placements == "-":
                sys.stdout.write(result.placements_tsv())
            elif args.placements:
                result.write_placements(stack.enter_context(atomic_output(args.placements)))
            if split:
                from .io import epa_split, read_alignment

                reference, query = epa_split(
                    result.rows, {r.name for r in read_alignment(args.msa)}
                )
                os.makedirs(args.split_out, exist_ok=True)
                for key, text in (("reference", reference), ("query", query)):
                    path = split[f"--split-out {key}"]
                    stack.enter_context(atomic_output(path)).write(text)
        log.info("%s: %.2f s", PHASES["write"], stats.phases["write"])
        if args.report:
            report = {
                "command": "papara",
                "settings": result.settings,
                "seconds": time.perf_counter() - start,
                "phase_names": PHASES,
                **stats.as_dict(),
            }
            text = json.dumps(report, indent=2) + "\n"
            if args.report == "-":
                sys.stdout.write(text)
            else:
                stack.enter_context(atomic_output(args.report)).write(text)
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
    p.add_argument(
        "--list",
        action="store_true",
        help="list the kernels of the chosen backends (the engine's table) and exit",
    )
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
    _check_outputs({"--json": args.json, "--plot": args.plot})
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
        from .engine import cpu_backend, device_backends

        devices = tuple(cls.name for cls in device_backends() if cls.gpus())
        chosen = (cpu_backend().name, *devices)
    if args.list:
        from .engine import kernel_table

        for backend in chosen:
            for entry in kernel_table(backend=backend):
                print(f"{entry.name}\t{entry.task}\t{backend}")
        return 0
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
    for backend, names in info["kernels"].items():
        print(f"Kernels of {backend} ({len(names)}): " + ", ".join(names))
    return 0


# --------------------------------------------------------------------------------------------
# dpalign serve
# --------------------------------------------------------------------------------------------


def _add_serve(sub) -> None:
    p = sub.add_parser(
        "serve",
        help="keep a process with everything loaded; later dpalign commands run in it",
        description="Start a resident dpalign process for this user, installation and "
        "environment. While it runs, a dpalign command (align, search, papara, devices) hands "
        "itself over to it and starts in ~0.03 s instead of ~0.7 s (Python, NumPy, Numba and "
        "the compiled kernels are loaded; a search database whose file is unchanged is not "
        "read again). Outputs, errors and exit statuses are the command's own. A command runs "
        "in its own process when every server process is busy with another, with "
        "DPALIGN_SERVER=off, or for bench and Dask options.",
    )
    what = p.add_mutually_exclusive_group()
    what.add_argument(
        "--detach", action="store_true", help="run in the background; return once it is ready"
    )
    what.add_argument("--stop", action="store_true", help="stop the running server")
    what.add_argument("--status", action="store_true", help="say whether a server runs")
    p.add_argument(
        "--idle",
        type=float,
        default=900.0,
        metavar="SECONDS",
        help="end after this long without a command (default: 900)",
    )
    p.add_argument(
        "--workers",
        type=_positive,
        default=1,
        metavar="N",
        help="server processes, each running one command at a time (default: 1; for commands "
        "run side by side, e.g. from a workflow manager)",
    )
    p.add_argument("--worker", type=int, default=0, help=argparse.SUPPRESS)  # a detached one's
    _add_common(p)
    p.set_defaults(run=_run_serve)


def _run_serve(args) -> int:
    import os

    from _dpalign_entry import installation_key, socket_path

    from . import serve
    from .errors import OptionError

    if not hasattr(os, "getuid"):
        raise OptionError("dpalign serve needs Unix sockets that carry descriptors (Linux, macOS)")
    key = installation_key()
    running = serve.running(key)
    if args.stop or args.status:
        if not running:
            print("dpalign serve: no server runs for this installation and environment")
            return 0 if args.stop else 1
        for path in running:
            answer = serve.ask(path, "stop" if args.stop else "status")
            if answer is None:
                continue  # it ended meanwhile
            if args.stop:
                print(f"dpalign serve: stopped the server (pid {answer['stopped']})")
                continue
            up = time.time() - answer["since"]
            busy = ", busy" if answer["busy"] else ""
            print(
                f"dpalign serve: pid {answer['pid']} on {path}, up {up:.0f} s, "
                f"{answer['commands']} commands{busy}"
            )
        return 0
    if args.idle <= 0:
        raise OptionError("--idle must be more than 0 seconds")
    path = socket_path(worker=args.worker, key=key)
    if args.worker == 0 and running:
        raise OptionError(
            f"a dpalign server already runs on {running[0]} (dpalign serve --stop ends it)"
        )
    if args.detach:
        for worker in range(args.workers):
            where = socket_path(worker=worker, key=key)
            pid = serve.start_detached(where, args.idle, args.verbose, worker=worker)
            print(f"dpalign serve: ready (pid {pid}, {where}); dpalign serve --stop ends it")
        return 0
    serve.log_to_stderr(args.verbose)
    others = [  # the other workers, in this terminal's process group (Ctrl-C ends them too)
        serve.start_worker(args.idle, args.verbose, worker) for worker in range(1, args.workers)
    ]
    server = serve.Server(path, idle=args.idle)
    seconds, failed = serve.warm_up(serve.make_folder(path))
    if failed:  # the server still runs them (they may fail the same way for the user)
        log.warning("the warm-up's %s failed", ", ".join(failed))
    server.bind()
    print(
        f"dpalign serve: ready in {seconds:.1f} s (pid {os.getpid()}, {path}"
        + (f", and {len(others)} more workers" if others else "")
        + f"); it ends after {args.idle:.0f} s without a command, on Ctrl-C or "
        "dpalign serve --stop",
        file=sys.stderr,
        flush=True,
    )
    try:
        server.run()
    finally:
        for child in others:
            child.wait()
    return 0


# --------------------------------------------------------------------------------------------
# dpalign align / dpalign search: shared scoring options
# --------------------------------------------------------------------------------------------

_GAP_HELP = (
    "a gap of length k costs OPEN + EXTEND*k (scikit-bio's convention, and BLAST's: its "
    "11/1 is --gap-open 11 --gap-extend 1; parasail's and pyopal's 'open' is OPEN + EXTEND). "
    "--gap-open 0 gives linear gaps (k*EXTEND); OPEN may be below 0 (opening cheaper than "
    "extending; --backend reference) while OPEN + EXTEND >= 0. Scores and costs may have "
    "decimals (EMBOSS's 10/0.5), computed exactly"
)


def _number(text: str) -> int | float:
    """argparse type: a score, whole or decimal (9.5, -0.5); kept exact (see Scoring)."""
    from decimal import Decimal, InvalidOperation

    try:
        value = Decimal(text)
    except InvalidOperation:
        value = None
    if value is None or not value.is_finite():
        raise argparse.ArgumentTypeError(f"expected a number such as 2, -1 or 0.5, not {text!r}")
    return int(value) if value == value.to_integral_value() else float(text)


def _cost(text: str) -> int | float:
    """argparse type: a gap extension cost, a number >= 0."""
    value = _number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(
            f"gap costs are positive numbers subtracted from the score, not {value}"
        )
    return value


def _whole(text: str) -> int:
    """argparse type: a (possibly negative) whole number."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, not {text!r}") from None


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
    sub.add_argument(
        "--match", type=_number, default=None, metavar="M", help="match score (1; 2.5 is fine)"
    )
    p.add_argument(
        "--mismatch", type=_number, default=None, metavar="X", help="mismatch score (-1)"
    )
    p.add_argument("--gap-open", type=_number, default=0, metavar="OPEN", help=_GAP_HELP + " (0)")
    p.add_argument(
        "--gap-extend", type=_cost, default=2, metavar="EXTEND", help="see --gap-open (2)"
    )
    p.add_argument(
        "--wildcard",
        metavar="LETTER",
        help="a letter that scores 0 against anything (Biopython's wildcard; default: none)",
    )
    p.add_argument(
        "--unknown",
        metavar="SYMBOL|SCORE",
        help="letters outside the matrix score as this matrix symbol (X with BLOSUM62) or "
        "this score against everything (default: they are an error)",
    )
    p.add_argument(
        "--case-sensitive",
        action="store_true",
        help="lowercase letters are not read as uppercase (they are then outside the matrix)",
    )


def _scoring(args):
    from .errors import OptionError
    from .scoring import Scoring

    if args.matrix and args.mismatch is not None:
        raise OptionError("--mismatch goes with --match, not with --matrix")
    gap = args.gap_extend if args.gap_open == 0 else (args.gap_open, args.gap_extend)
    unknown = args.unknown
    if unknown is not None:
        try:
            unknown = _number(unknown)
        except argparse.ArgumentTypeError:
            pass  # a matrix symbol
    options = {
        "wildcard": args.wildcard,
        "unknown": unknown,
        "case_sensitive": True if args.case_sensitive else None,
    }
    if args.matrix:
        return Scoring(args.matrix, gap, **options)
    match = 1 if args.match is None else args.match
    mismatch = -1 if args.mismatch is None else args.mismatch
    return Scoring((match, mismatch), gap, **options)


def _describe_scoring(scoring, mode: str) -> str:
    cost = scoring.gap_cost
    o, e = cost if isinstance(cost, tuple) else (0, cost)
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
        choices=["pretty", "cigar", "fasta", "json", "sam"],
        help="pretty: the alignment in blocks (pairs of up to "
        f"{PRETTY_MAX_RESIDUES:,} residues together); cigar: one tab-separated line per "
        "pair (a, b, score, a start, a end, b start, b end, CIGAR, and the strand of B, + or "
        "-, with --strand minus or both); fasta: the gapped pair; json: everything; sam: "
        "SAM 1.6 with A as the reads and B as the references (POS 1-based, soft clips for "
        "A's unaligned ends, FLAG 16 for B's minus strand, NM and AS tags; each read's best "
        "alignment primary, the others secondary) (default: pretty)",
    )
    p.add_argument(
        "--cigar", default="=X", choices=["=X", "M"], help="CIGAR operations (default: =X)"
    )
    p.add_argument(
        "--score-only",
        action="store_true",
        help="no traceback: each pair's score and where its alignment ends, one tab-separated "
        "line per pair (a, b, score, a end, b end, 1-based, and the strand of B with --strand "
        "minus or both; --format json: the library's 0-based, exclusive a_end and b_end). "
        "Long pairs run the forward pass only: on several --device GPUs in skewed row bands, "
        "a global pair as two halves joined in the middle. Takes --format pretty (the "
        "default: these lines), cigar (the same) or json",
    )
    p.add_argument(
        "--strand",
        default="plus",
        choices=["plus", "minus", "both"],
        help="align A with B as given (plus), with B's reverse complement (minus), or both, "
        "keeping the better; minus-strand B coordinates count along the reverse complement "
        "(default: plus)",
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
        "$DPALIGN_OPENCL_DEVICE, else the first GPU, else the first CPU device); several, "
        "comma-separated, or 'all' (every GPU): each long pair's matrix is split into column "
        "bands, one per device, filled at once",
    )
    p.add_argument(
        "--bands",
        type=_positive,
        metavar="N",
        help="split each long pair's matrix into N column bands filled at once, each by one "
        "CPU thread (numba; the same alignment)",
    )
    p.add_argument(
        "--prune",
        action="store_true",
        help="--mode local, long pairs on an OpenCL device: skip the tiles that cannot reach "
        "the best score found so far (CUDAlign's block pruning; the same alignment, found "
        "faster the more similar the pair)",
    )
    p.add_argument("--threads", type=int, default=None, metavar="N", help="CPU threads")
    _add_progress(p, "always show a progress bar of cells for long pairs (default: on a terminal)")
    p.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="fill each long pair's column bands on the workers of an existing Dask cluster "
        "(tcp://host:8786), one band per worker: on its CPU cores, or with --backend opencl on "
        "its OpenCL device (--device: which one there)",
    )
    p.add_argument(
        "--dask-workers",
        type=_positive,
        metavar="N",
        help="the same on a local Dask cluster of N worker processes started for the run",
    )
    _add_common(p)
    p.set_defaults(run=_run_align)


#: ``--format pretty`` refuses pairs longer than this together (a 10 Mb pair would print
#: ~700,000 lines of 60 columns: nobody reads it; sam, cigar, fasta and json stay compact).
PRETTY_MAX_RESIDUES = 2_000_000


def _strand_note(aln) -> str:
    """`` (minus strand)`` where B's reverse complement was aligned (``--strand``)."""
    if aln.strand is None:
        return ""
    return " (minus strand)" if aln.strand == "-" else " (plus strand)"


def _pretty(name_a: str, name_b: str, aln, width: int = 60) -> str:
    import numpy as np

    top, bottom = aln.gapped()
    if top.isascii() and bottom.isascii():
        t = np.frombuffer(top.encode("ascii"), np.uint8)
        u = np.frombuffer(bottom.encode("ascii"), np.uint8)
        gap = (t == ord("-")) | (u == ord("-"))
        marks = np.where(t == u, ord("|"), np.where(gap, ord(" "), ord(".")))
        middle = marks.astype(np.uint8).tobytes().decode("ascii")
    else:
        middle = "".join(
            "|" if x == y else ("." if "-" not in (x, y) else " ")
            for x, y in zip(top, bottom, strict=True)
        )
    a0, a1 = _span(aln.a_start, aln.a_end)
    b0, b1 = _span(aln.b_start, aln.b_end)
    label = max(len(name_a), len(name_b))
    out = [
        f"# {name_a} vs {name_b}{_strand_note(aln)}: score {aln.score}, {aln.mode}; "
        f"{name_a} {a0}-{a1}, "
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


def _align_bands(args):
    """``(backend, device, Bands or None, closer)`` for --device lists, --bands and Dask."""
    from .bands import Bands
    from .engine import backend_class, get_backend

    specs = [s.strip() for s in (args.device or "").split(",") if s.strip()]
    dask = args.scheduler or args.dask_workers is not None
    chosen = sum((len(specs) > 1 or args.device == "all", args.bands is not None, bool(dask)))
    if chosen > 1:
        raise DpalignError(
            "--bands, several --device and --scheduler/--dask-workers each split a pair into "
            "bands: give one of them"
        )
    if args.device == "all":
        from .devices import opencl_devices

        found, why = opencl_devices()
        specs = [d["id"] for d in found if d["type"] == "GPU"] or [d["id"] for d in found]
        if not specs:
            raise DpalignError(f"--device all: {why or 'no OpenCL device was found'}")
    if len(specs) > 1:
        # a device named twice gets queues of its own per band; all of them in one OpenCL
        # context where they share a platform, so that their border copies wait on each
        # other on the devices (skewed bands); global scores as two independent halves
        share = ",".join(specs)
        devices = [
            get_backend("opencl", device=spec, stream=specs[:k].count(spec), share=share)
            for k, spec in enumerate(specs)
        ]
        return devices[0], None, Bands(devices=devices, skewed=True, halves=True), None
    device = specs[0] if specs else None
    if args.bands is not None:
        return args.backend, device, Bands(cpu=args.bands), None
    if dask:
        cluster = get_backend("dask", scheduler=args.scheduler, workers=args.dask_workers)
        if args.backend != "auto" and backend_class(args.backend).kind == "device":
            # each worker holds the pair on its own device (found there, not here)
            held = (args.backend, {"device": device} if device else {})
            return "auto", None, Bands(cluster=cluster, cluster_device=held), cluster.close
        return args.backend, device, Bands(cluster=cluster), cluster.close
    return args.backend, device, None, None


def _long_pair_cells(pairs, traceback: bool = True) -> int:
    """Cells the long-pair path will fill for ``pairs`` of lengths (a progress bar's total)."""
    from . import config
    from .longpair import expected_cells

    cells = (expected_cells(m, n, traceback) for m, n in pairs if m * n > config.LONG_PAIR_CELLS)
    return sum(cells)


def _run_align(args) -> int:
    import shlex

    from . import sam
    from .alphabet import reverse_complement_codes
    from .engine import backend_class
    from .errors import InternalError
    from .io import atomic_output
    from .pairwise import align, score_pair

    if args.device is not None and (
        args.backend == "auto" or backend_class(args.backend).kind != "device"
    ):
        raise DpalignError(f"--device applies to --backend opencl, not {args.backend}")
    if args.prune and args.mode != "local":
        raise DpalignError(f"--prune is for --mode local, not {args.mode}")
    _cap_threads(args)
    _check_outputs({"--out": args.out}, {"A": args.a, "B": args.b})
    if args.score_only and args.format in ("sam", "fasta"):
        raise DpalignError(
            f"--score-only gives scores and end cells, not alignments: --format {args.format} "
            "needs the alignment (use --format cigar or json, or leave out --score-only)"
        )
    scoring = _scoring(args)
    recs_a, codes_a = _read_encoded(args.a, scoring)
    recs_b, codes_b = _read_encoded(args.b, scoring)
    lengths = [(len(ca), len(cb)) for ca in codes_a for cb in codes_b]
    if args.format == "pretty" and not args.score_only:
        for (m, n), (ra, rb) in zip(lengths, [(x, y) for x in recs_a for y in recs_b], strict=True):
            if m + n > PRETTY_MAX_RESIDUES:
                raise DpalignError(
                    f"--format pretty prints every column in blocks of 60: {ra.name} ({m:,}) "
                    f"with {rb.name} ({n:,}) is longer than the {PRETTY_MAX_RESIDUES:,} residues "
                    "it is meant for; use --format sam, cigar, fasta or json"
                )
    strands = 1 if args.strand != "both" else 2
    cells = _long_pair_cells(lengths, not args.score_only) * strands
    bar = _progress_bar(cells, args.progress, "scoring" if args.score_only else "aligning")
    backend, device, bands, close = _align_bands(args)
    try:
        with ExitStack() as stack:
            out = sys.stdout if args.out == "-" else stack.enter_context(atomic_output(args.out))
            if args.format == "sam":
                targets = [(rb.name, len(cb)) for rb, cb in zip(recs_b, codes_b, strict=True)]
                line = shlex.join(["dpalign", *sys.argv[1:]])
                out.write(sam.header(targets, line, __version__))
            elif args.format == "json":
                out.write("[")
            count = 0
            for ra, ca in zip(recs_a, codes_a, strict=True):
                per_query = []
                for rb, cb in zip(recs_b, codes_b, strict=True):
                    if args.score_only:
                        got = score_pair(
                            ca, cb, args.mode, scoring=scoring, backend=backend, device=device,
                            strand=args.strand, threads=args.threads,
                            progress=bar.update if bar else None, bands=bands, prune=args.prune,
                        )  # fmt: skip
                        out.write(_score_text(args.format, ra.name, rb.name, got, count))
                        count += 1
                        continue
                    aln = align(
                        ca,
                        cb,
                        args.mode,
                        scoring=scoring,
                        backend=backend,
                        cigar=args.cigar,
                        device=device,
                        strand=args.strand,
                        threads=args.threads,
                        progress=bar.update if bar else None,
                        bands=bands,
                        prune=args.prune,
                    )
                    if args.format == "sam":
                        per_query.append((rb, cb, aln))
                    else:
                        out.write(_align_text(args.format, ra.name, rb.name, aln, count))
                    count += 1
                if per_query:
                    best = max(range(len(per_query)), key=lambda k: (per_query[k][2].score, -k))
                    seq = {}
                    for k, (rb, cb, aln) in enumerate(per_query):
                        minus = aln.strand == "-"
                        if k == best and minus not in seq:
                            shown = reverse_complement_codes(ca, scoring.alphabet) if minus else ca
                            seq[minus] = scoring.alphabet.decode(shown)
                        text = seq.get(minus, "") if k == best else ""
                        out.write(
                            sam.record(ra.name, rb.name, aln, len(ca), len(cb), text, k != best)
                        )
            if args.format == "json":
                out.write("\n]\n" if count else "]\n")
            out.flush()
    except InternalError as exc:  # a kernel bug (nothing written): name the pair it hit
        raise InternalError(f"A record {ra.name!r} with B record {rb.name!r}: {exc}") from None
    finally:
        if bar:
            bar.close()
        if close is not None:
            close()
    done = "pairs scored" if args.score_only else "alignments"
    log.info("%d %s; %s", count, done, _describe_scoring(scoring, args.mode))
    return 0


def _score_text(fmt: str, na: str, nb: str, got, index: int) -> str:
    """One pair of ``--score-only``: a json element of the list, else a tab-separated line
    (a, b, score, 1-based ends, strand)."""
    if fmt == "json":
        item = {"a": na, "b": nb, "score": got.score, "a_end": got.a_end, "b_end": got.b_end}
        return _json_item({**item, "strand": got.strand, "backend": got.backend}, index)
    strand = f"\t{got.strand}" if got.strand is not None else ""
    return f"{na}\t{nb}\t{got.score}\t{got.a_end}\t{got.b_end}{strand}\n"


def _json_item(item: dict, index: int) -> str:
    """An element of the json list the align command writes (a comma before all but the
    first)."""
    text = json.dumps(item, indent=2)
    return ("," if index else "") + "\n" + "\n".join("  " + x for x in text.split("\n"))


def _align_text(fmt: str, na: str, nb: str, aln, index: int) -> str:
    """One pair in --format json (an element of the list), cigar, fasta or pretty."""
    if fmt == "json":
        return _json_item({"a": na, "b": nb, **aln.as_dict()}, index)
    if fmt == "cigar":
        a0, a1 = _span(aln.a_start, aln.a_end)
        b0, b1 = _span(aln.b_start, aln.b_end)
        strand = f"\t{aln.strand}" if aln.strand is not None else ""
        return f"{na}\t{nb}\t{aln.score}\t{a0}\t{a1}\t{b0}\t{b1}\t{aln.cigar}{strand}\n"
    if fmt == "fasta":
        top, bottom = aln.gapped()
        strand = f" strand={aln.strand}" if aln.strand is not None else ""
        return f">{na} score={aln.score}\n{top}\n>{nb}{strand}\n{bottom}\n"
    return _pretty(na, nb, aln)


# --------------------------------------------------------------------------------------------
# dpalign search
# --------------------------------------------------------------------------------------------


def _add_search(sub) -> None:
    p = sub.add_parser(
        "search",
        help="search a FASTA database with query sequences (BLAST-style tabular output)",
        description="Score every query against every database sequence with the SIMD "
        "kernels, rank the best hits, trace back only the hits printed. --outfmt dpalign "
        "(default): one tab-separated row per hit: query, target, score, query start, query "
        "end, target start, target end (and the strand with --strand both); --outfmt 6: "
        "BLAST's 12 tabular columns (qseqid sseqid pident length mismatch gapopen qstart "
        "qend sstart send evalue bitscore) with Karlin-Altschul E-values and bit scores from "
        "BLAST's published parameters (local mode; BLOSUM45/50/62/80/90, PAM30/70/250 and "
        "blastn's match/mismatch scores, each with the gap costs BLAST supports). "
        "Coordinates are 1-based and inclusive like BLAST's (an empty local alignment prints "
        "0 0); a minus-strand hit has its target coordinates reversed; a local search prints "
        "no zero-score rows (an empty local alignment is no hit). A summary with the "
        "GCUPS achieved goes to standard error.",
    )
    p.add_argument("--query", required=True, metavar="FASTA", help="query sequences")
    p.add_argument("--db", required=True, metavar="FASTA", help="database sequences")
    _add_scoring(p, "local")
    p.add_argument(
        "--top", type=_positive, default=10, metavar="N", help="hits per query (default: 10)"
    )
    p.add_argument(
        "--outfmt",
        default="dpalign",
        choices=["dpalign", "6"],
        help="output columns: dpalign (scores and coordinates) or 6 (BLAST tabular); "
        "default: dpalign",
    )
    p.add_argument(
        "--evalue",
        type=float,
        default=None,
        metavar="E",
        help="--outfmt 6: print only hits with an E-value of at most E (BLAST's -evalue, "
        "whose default is 10; default here: every one of the --top hits)",
    )
    p.add_argument(
        "--strand",
        default="plus",
        choices=["plus", "both"],
        help="both: also search the reverse complement of each (nucleotide) query, in the "
        "same pass (default: plus)",
    )
    p.add_argument("--out", default="-", metavar="FILE", help="output file (default: stdout)")
    _add_backend(p, ["auto", "numba", "reference", "opencl", "hybrid", "dask"])
    p.add_argument(
        "--device",
        metavar="DEVICE",
        help="OpenCL device for --backend opencl or hybrid (see 'dpalign devices')",
    )
    _add_common(p)
    p.set_defaults(run=_run_search)


def _read_database(path, scoring):
    """A search database as ``(names, codes of every record in one buffer, offsets)``:
    parsed into arrays and encoded in one pass, no Python object per record; a bad
    character is reported as :func:`_read_encoded` reports it."""
    from .alphabet import INVALID
    from .errors import InputError
    from .io import read_fasta_block

    alphabet = scoring.alphabet
    # encoded through the alphabet's byte table as each megabyte is parsed (what
    # Alphabet.encode does with bytes, without its copies: ~0.15 s less for 200,000 proteins)
    block = read_fasta_block(path, allow_empty=True, table=alphabet.lut.tobytes())
    residues = block.residues
    if residues.size and int(residues.max()) == INVALID:
        _read_encoded(path, scoring)  # raises with the record, line and column
        raise InputError(  # pragma: no cover - the per-record encoder finds every bad letter
            f"a character outside the {alphabet.name} alphabet", path=str(path)
        )
    return block.names, residues, block.offsets


def _warm_traceback(
    scoring, mode: str, backend, largest_pair: int, parts=("short", "long")
) -> None:
    """Load the traceback kernels printed hits take on ``backend``: short pairs, and pairs
    over its long-pair limit (anti-diagonal tiles) when a pair may have ``largest_pair``
    cells (``parts``: which of the two; "long-fill" and "long-trace": one half of the long
    pairs' kernels each, see :func:`dpalign.longpair.warm_up`)."""
    import numpy as np

    from .pairwise import align

    if "short" in parts:
        codes = np.zeros(8, dtype=np.uint8)
        align(codes, codes, mode, scoring=scoring, backend=backend)
    limit = backend.long_pair_cells()
    if limit is None or largest_pair <= limit:
        return
    size = int(limit**0.5) + 2  # the smallest square pair over the limit
    if "long" in parts:
        codes = np.zeros(size, dtype=np.uint8)
        align(codes, codes, mode, scoring=scoring, threads=1, backend=backend)
    for half in ("fill", "trace"):
        if f"long-{half}" in parts:
            from .longpair import warm_up

            warm_up(scoring, mode, half, size)


#: A child that compiles traceback kernels into Numba's disk cache (see
#: :func:`_start_traceback_compile`).
_TRACEBACK_CHILD = """
import os, pickle, sys
os.nice(5)
from dpalign.cli import _warm_traceback
from dpalign.engine import cpu_backend
scoring, mode, threads, part = pickle.load(sys.stdin.buffer)
_warm_traceback(scoring, mode, cpu_backend(threads), 1 << 62, part.split(","))
"""


class _Children:
    """Child processes seen as one: :meth:`poll` and ``returncode`` are None until every
    one has ended, then the first non-zero exit status (else 0)."""

    def __init__(self, children) -> None:
        self.children = children

    @property
    def returncode(self) -> int | None:
        codes = [c.returncode for c in self.children]
        return None if None in codes else next((c for c in codes if c), 0)

    def poll(self) -> int | None:
        for child in self.children:
            child.poll()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        for child in self.children:
            child.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return self.returncode

    def kill(self) -> None:
        for child in self.children:
            if child.poll() is None:
                child.kill()


def _start_traceback_compile(scoring, mode: str, threads):
    """Compile the traceback kernels in child processes while a device searches.

    On a device backend the host is idle but for feeding the device, and a first run
    (empty Numba cache) would otherwise compile the traceback kernels (~10 s on the H100
    host) before the search starts; compiled in the same process beside the search they
    would hold the GIL the search's host work needs. Three children, side by side: the
    short-pair kernels (a third of the compile time), the long-pair (anti-diagonal) tile
    fill and the long-pair traceback, so the kernels are ready sooner (a search's first
    hits are traced back while the device scores the rest once they are). The children
    write Numba's disk cache; the parent and its traceback workers load the kernels from it
    (:func:`_finish_traceback_compile`).
    With fewer than 4 cores one child compiles both (each child's imports take a core for
    a second even when the cache already holds the kernels).
    Returns the children (None where they could not start: the parent compiles them).
    """
    import pickle
    import subprocess

    from .config import cpu_threads

    # the long pairs' kernels in two halves (fill 4.0 s, traceback 5.9 s of their 10 s
    # compile here), each in a child of its own
    cores = cpu_threads(threads)
    parts = ("long-trace", "long-fill", "short") if cores >= 4 else ("long,short",)
    children = []
    try:
        for part in parts:
            child = subprocess.Popen(
                [sys.executable, "-c", _TRACEBACK_CHILD],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            children.append(child)
            child.stdin.write(pickle.dumps((scoring, mode, threads, part)))
            child.stdin.close()
    except (OSError, pickle.PicklingError):
        _Children(children).kill()
        return None
    return _Children(children)


def _finish_traceback_compile(child, timeout: float = 300.0) -> None:
    """Wait for :func:`_start_traceback_compile`'s children (stopped after ``timeout``:
    the parent then compiles what it needs itself)."""
    import subprocess

    if child is None:
        return
    try:
        child.wait(timeout)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


#: Printed hits are traced back in worker processes from this many on (device searches,
#: 3+ cores): a hit's traceback takes ~0.5 ms, mostly Python holding the GIL, so threads
#: do not share it out (10,000 hits: 5.4 s on the 16 cores of the H100 host).
TRACE_PROCESS_HITS = 2_000
#: Hits per worker job.
TRACE_CHUNK = 64
#: What the traceback workers' fork server imports before it forks them.
TRACE_PRELOAD = ["dpalign.cli", "dpalign.pairwise", "dpalign.search"]


def _start_trace_workers(n_hits: int, threads):
    """Worker processes for the traceback, spawned (importing dpalign and Numba) while the
    device searches; None for fewer than :data:`TRACE_PROCESS_HITS` hits or 3 cores."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from .config import cpu_threads

    workers = min(16, cpu_threads(threads)) - 2  # two cores stay with the search
    if n_hits < TRACE_PROCESS_HITS or workers < 2:
        return None
    try:
        # Forked from a fork server that has imported dpalign once (not 14 spawned
        # interpreters importing it side by side, nor forks of this process, which may hold
        # a database by then): 14 spawned workers slowed the database's reading by ~0.45 s on
        # the H100 host, 9x on this 2-core machine.
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(TRACE_PRELOAD)
    except ValueError:  # pragma: no cover - no fork server on this platform
        context = multiprocessing.get_context("spawn")
    try:
        pool = ProcessPoolExecutor(workers, mp_context=context, initializer=_nice_worker)
    except (OSError, RuntimeError):
        return None

    def spawn() -> None:
        # Each submit may start a process (the first waits for the fork server's imports),
        # so they start on a thread of their own, off the way to the first kernel.
        try:
            for _ in range(workers):
                pool.submit(_trace_worker_ready)
        except (OSError, RuntimeError):  # a broken or shut pool: the traceback takes threads
            pass

    import threading

    threading.Thread(target=spawn, name="dpalign-trace-spawn", daemon=True).start()
    return pool


def _nice_worker() -> None:
    """A traceback worker's first step: a lower priority, so that its imports (while the
    device searches) leave the cores to the search's own host work."""
    import os

    try:
        os.nice(10)
    except OSError:  # pragma: no cover - not allowed here: the default priority
        pass


def _trace_worker_ready() -> None:
    """A traceback worker's start: the imports (its kernels load from Numba's cache on the
    first pair, once the parent's compile child has filled it)."""
    from . import pairwise, search  # noqa: F401
    from .engine import cpu_backend

    cpu_backend(1)


def _trace_chunk(pairs, mode, ends, scoring) -> tuple[list, float]:
    """Alignments of ``(query codes, target codes)`` pairs (a worker process's share), and
    the seconds they took there."""
    from .engine import cpu_backend
    from .search import trace_pair

    start = time.perf_counter()
    tracer = cpu_backend(1)  # one thread a pair: every worker traces pairs side by side
    done = [trace_pair(q, t, mode, ends, scoring, tracer, 1) for q, t in pairs]
    return done, time.perf_counter() - start


class _HitTracer:
    """Traces printed hits back: in ``workers`` (a process pool from
    :func:`_start_trace_workers`) where given, chunk by chunk as the search ranks them
    (:meth:`add`, while the device scores the next chunks) once ``ready()`` says Numba's
    cache holds the kernels (``wait``, where given, is called on a thread of its own and
    returns when they are: the hits held back until then go out at once, not at the next
    chunk); the rest, or all of them without workers, in :meth:`finish`."""

    def __init__(self, workers, threads, ready=None, wait=None) -> None:
        import threading

        self.workers = workers
        self.threads = threads
        self.ready = ready
        self.waiting: list = []  # hits not handed to the workers yet
        self.jobs: list = []  # (hits, future)
        self.sent: set[int] = set()  # ids of the hits handed out
        self.early = 0  # hits handed out before finish()
        self.failure: str | None = None
        self.lock = threading.Lock()
        if workers is not None and wait is not None:
            threading.Thread(
                target=self._when_ready, args=(wait,), name="dpalign-trace-ready", daemon=True
            ).start()

    def _when_ready(self, wait) -> None:
        try:
            wait()
        except Exception:  # noqa: BLE001 - a compile that failed: finish() traces the hits
            return
        with self.lock:
            self.early += self._submit()

    def add(self, hits) -> None:
        """More hits to trace back (a ranked chunk's printed hits)."""
        with self.lock:
            self.waiting.extend(hits)
            if self.workers is not None and (self.ready is None or self.ready()):
                self.early += self._submit()

    def _submit(self) -> int:
        from concurrent.futures.process import BrokenProcessPool

        hits, self.waiting = self.waiting, []
        if self.workers is None or self.failure is not None or not hits:
            return 0
        pairs = [h.pair() for h in hits]
        mode, ends, scoring = pairs[0][2:]
        step = TRACE_CHUNK
        for k in range(0, len(hits), step):
            part = [p[:2] for p in pairs[k : k + step]]
            try:
                job = self.workers.submit(_trace_chunk, part, mode, ends, scoring)
            except (BrokenProcessPool, OSError, RuntimeError) as exc:  # a pool down or shut
                self.failure = f"{type(exc).__name__}: {exc}"  # the rest go to threads
                return k
            self.jobs.append((hits[k : k + step], job))
            self.sent.update(id(h) for h in hits[k : k + step])
        return len(hits)

    def finish(self, hits) -> dict:
        """Trace back every hit of ``hits`` (the printed ones) not traced yet; returns how
        (for the report)."""
        from concurrent.futures import ThreadPoolExecutor
        from concurrent.futures.process import BrokenProcessPool

        from .config import cpu_threads

        with self.lock:
            self.waiting = [h for h in hits if id(h) not in self.sent]
            self._submit()
            jobs = list(self.jobs)
        busy = 0.0
        for part, job in jobs:
            try:
                alignments, seconds = job.result()
            except (BrokenProcessPool, OSError, RuntimeError) as exc:
                self.failure = f"{type(exc).__name__}: {exc}"
                continue  # traced on threads below
            for hit, aln in zip(part, alignments, strict=True):
                hit.adopt(aln)
            busy += seconds
        if self.workers is not None and self.failure is None:
            return {
                "hits": len(hits),
                "jobs": len(jobs),
                "worker_seconds": round(busy, 3),
                "during_search": self.early,
            }
        threads = min(cpu_threads(self.threads), len(hits))
        if threads >= 2:
            with ThreadPoolExecutor(threads) as pool:  # one thread a pair (no tiles on every core)
                list(pool.map(lambda hit: hit.trace(1), hits))
        return {"hits": len(hits), "threads": threads, "pool_failure": self.failure}


def _trace_back(hits, threads, workers=None) -> dict:
    """Trace back the hits to be printed: in ``workers`` (a process pool from
    :func:`_start_trace_workers`) where given, else on every core's thread (the kernels
    release the GIL; the Python around them does not). Returns how (for the report)."""
    return _HitTracer(workers, threads).finish(hits)


#: Whether this process is a ``dpalign serve`` server (set by :func:`main`): only then are
#: search databases kept between commands.
_SERVING = [False]
#: Search databases a server keeps, newest last: {file's identity: Database}.
_KEPT_DATABASES: dict = {}
#: How many a server keeps.
KEPT_DATABASES = 2


def _database_identity(path, scoring) -> tuple | None:
    """What must be unchanged for a kept database to stand for ``path`` (None: never kept,
    e.g. outside a server, or standard input)."""
    import os

    if not _SERVING[0] or str(path) == "-":
        return None
    try:
        info = os.stat(path)
    except OSError:
        return None  # reading reports it
    return (
        os.path.realpath(path), info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns,
        info.st_ctime_ns, scoring.alphabet.lut.tobytes(),
    )  # fmt: skip


def kept_database(path, scoring):
    """The :class:`~dpalign.search.Database` a server read from ``path`` for this alphabet,
    if the file has not changed since (same inode, size and times); else None."""
    identity = _database_identity(path, scoring)
    return _KEPT_DATABASES.get(identity) if identity is not None else None


def _keep_database(identity, db, scoring) -> None:
    if identity is None or identity != _database_identity(identity[0], scoring):
        return  # not serving, or the file changed while it was read
    _KEPT_DATABASES.pop(identity, None)
    _KEPT_DATABASES[identity] = db
    while len(_KEPT_DATABASES) > KEPT_DATABASES:
        _KEPT_DATABASES.pop(next(iter(_KEPT_DATABASES)))


def _read_search_inputs(query_path, db_path, scoring, queries_read=None):
    """``(query records, query codes, database, seconds)`` of a search, the database as
    ``(names, residues, offsets)`` or, in a server that has it, as a kept Database;
    ``queries_read`` (a Future), where given, gets the number of queries (or the error) as
    soon as they are read, before the database."""
    start = time.perf_counter()
    try:
        queries, q_codes = _read_encoded(query_path, scoring)
    except BaseException as exc:
        if queries_read is not None:
            queries_read.set_exception(exc)
        raise
    if queries_read is not None:
        queries_read.set_result(len(q_codes))
    mark = time.perf_counter()
    kept = kept_database(db_path, scoring)
    if kept is not None:
        log.info("search: queries read in %.3f s, the database kept", mark - start)
        return queries, q_codes, kept, time.perf_counter() - start
    identity = _database_identity(db_path, scoring)
    names, residues, offsets = _read_database(db_path, scoring)
    end = time.perf_counter()
    log.info(
        "search: queries read in %.3f s, the database (%d records) in %.3f s",
        mark - start, len(names), end - mark,
    )  # fmt: skip
    return queries, q_codes, (names, residues, offsets, identity), end - start


#: A gzip-compressed FASTA file's size times this is taken for its text's (sequence text
#: compresses ~2x for proteins, ~4x for DNA; only a more redundant file is underestimated).
GZIP_EXPANSION = 4


def _text_size(path) -> int | None:
    """About how many bytes of text the file ``path`` holds, from its size before it is
    read (gzip files :data:`GZIP_EXPANSION` times theirs); None when unknown (standard
    input, other compression, a missing file: reading reports that)."""
    import os

    name = str(path)
    if name == "-" or name.endswith((".bz2", ".xz", ".zst")):
        return None
    try:
        size = os.path.getsize(path)
    except OSError:
        return None
    return size * GZIP_EXPANSION if name.endswith((".gz", ".bgz")) else size


def _papara_cells(args) -> float | None:
    """About how many cells a PaPaRa run takes, from its files' sizes before they are read:
    reads x read length x edges x columns, with the reads file's size for the first two and
    twice the MSA file's (taxa x columns; about two edges a taxon) for the others (None:
    unknown, see :func:`_text_size`)."""
    reads, msa = _text_size(args.reads), _text_size(args.msa)
    return None if reads is None or msa is None else 2.0 * reads * msa


def _search_cells(args) -> float | None:
    """About how many cells a search takes, from its files' sizes before they are read
    (headers and line ends count as residues: a slight overestimate); None when unknown
    (see :func:`_text_size`)."""
    query, db = _text_size(args.query), _text_size(args.db)
    if query is None or db is None:
        return None
    return query * db * (2 if args.strand == "both" else 1)


def _run_search(args) -> int:
    from concurrent.futures import Future, ThreadPoolExecutor

    from .engine import Task, backend_for
    from .errors import OptionError
    from .scoring import free_ends_tuple
    from .search import (
        traceback_backend,
    )

    _check_outputs(
        {"--out": args.out, "--report": args.report}, {"--query": args.query, "--db": args.db}
    )
    scoring = _scoring(args)
    stats = None
    if args.outfmt == "6":
        from .stats import parameters

        if args.mode != "local":
            raise OptionError(
                "--outfmt 6 gives E-values, which Karlin-Altschul statistics define for "
                f"local alignments; use --mode local (not {args.mode}) or --outfmt dpalign"
            )
        stats = parameters(scoring)
    elif args.evalue is not None:
        raise OptionError("--evalue goes with --outfmt 6 (E-values)")
    if args.backend == "auto" and scoring.kernel_problem() is not None:
        args.backend = "reference"  # auto: the reference for schemes the kernels cannot run
    whole = time.perf_counter()
    # The files are read on a thread while the backend starts (Numba's import, a device
    # probe) and loads its kernels: reading is mostly NumPy, which releases the GIL.
    queries_read: Future = Future()
    tracing = code = warmed = None
    try:
        with ThreadPoolExecutor(1, thread_name_prefix="dpalign-read") as pool:
            reading = pool.submit(_read_search_inputs, args.query, args.db, scoring, queries_read)
            backend = backend_for(_backend_from_args(args, _search_cells(args)), scoring)
            if args.backend == "auto":  # a GPU's own backend, not the work queue
                first = getattr(backend, "first_device", None)
                backend = (first() if first is not None else None) or backend
            run = backend.stats
            # Kernel loading and building (JIT) runs on a thread of its own beside the
            # reading, the packing and a device's layout of the database; what is left of
            # it then is timed apart from the search ("jit"). Started first: a first run's
            # program builds (and their child processes) are its longest set-up.
            warm = getattr(backend, "warm_up", None)
            if warm is not None:
                warming = ThreadPoolExecutor(1, thread_name_prefix="dpalign-warm")
                warmed = warming.submit(
                    warm, Task("pairwise", scoring, args.mode, free_ends_tuple(args.mode))
                )
                warming.shutdown(wait=False)
            compiling = None
            device_hits = bool(args.top) and backend.kind == "device"
            if device_hits and not _SERVING[0]:  # a server loads them here, once
                compiling = _start_traceback_compile(
                    scoring, args.mode, traceback_backend(backend).threads
                )
            if compiling is not None or (device_hits and _SERVING[0]):
                # a device search: the traceback may take workers,
                try:  # started once the queries are read (the database is still coming)
                    n_queries = queries_read.result()
                except Exception:  # noqa: BLE001 - reported by reading.result() below
                    n_queries = 0
                strands = 2 if args.strand == "both" else 1
                tracing = _start_trace_workers(n_queries * strands * args.top, args.threads)
            queries, q_codes, database, seconds = reading.result()
        run.phases = {"read": seconds, **run.phases}
        code = _search_and_write(
            args, scoring, stats, backend, run, whole, compiling, tracing, warmed,
            queries, q_codes, database,
        )  # fmt: skip
    finally:
        if tracing is not None:  # after a run every job is done: the workers end at once
            mark = time.perf_counter()
            tracing.shutdown(wait=code is not None, cancel_futures=True)
            log.info("search: traceback workers ended in %.3f s", time.perf_counter() - mark)
        if warmed is not None and code is None:
            warmed.cancel()
    # Nothing is left open (the workers and compile children have ended, a hybrid run's
    # device processes are closed): run() may end the process without the interpreter's
    # teardown (a GPU context, GBs of scores: 0.3-0.6 s here); a Dask cluster stays.
    _DONE_WITH_NOTHING_OPEN[0] = backend.kind != "cluster"
    return code


def _search_and_write(
    args, scoring, stats, backend, run, whole, compiling, tracing, warmed,
    queries, q_codes, database,
) -> int:  # fmt: skip
    """The rest of :func:`_run_search`, once the inputs are read and the backend is up
    (``warmed``: its warm-up, still running on a thread, or None; ``database`` as
    :func:`_read_search_inputs` gives it)."""
    from .gcups import gcups
    from .search import (
        Database,
        blast_coordinates,
        prepare_search,
        search_many,
        tabular_rows,
        traceback_backend,
        within_evalue,
    )

    with run.phase("pack"):
        if isinstance(database, Database):
            db = database
        else:
            names, residues, offsets, identity = database
            db = Database.from_codes(residues, offsets, names, sub_score=scoring)
            _keep_database(identity, db, scoring)
        # The database laid out as the search takes it, while kernels load or programs build
        # (a device's targets uploaded too): set-up, not search (the Numba backend's blocks
        # of 50,000 proteins were packed inside the timed search phase).
        prepare_search(q_codes, db, scoring, args.mode, backend)
    longest = max((len(c) for c in q_codes), default=0) * int(db.lengths.max(initial=0))
    with run.phase("jit"):
        if warmed is not None:
            warmed.result()
        if args.top and compiling is None:
            _warm_traceback(scoring, args.mode, traceback_backend(backend), longest)
    strands = 2 if args.strand == "both" else 1
    cells = strands * sum(len(q) for q in q_codes) * db.residues

    def printed(hits, codes):
        if args.evalue is not None:
            hits = within_evalue(hits, len(codes), stats, db.residues, len(db), args.evalue)
        if args.mode == "local":  # an empty local alignment is no hit (BLAST reports none)
            hits = [h for h in hits if h.score > 0]
        return hits

    # With worker processes, each chunk's hits are traced back while the device scores
    # the next chunks, once the compile child has filled Numba's cache (a first run's
    # workers would otherwise each compile the kernels).
    tracer = _HitTracer(
        tracing,
        args.threads,
        lambda: compiling is None or compiling.poll() is not None,
        compiling.wait if compiling is not None else None,
    )

    def ranked(indices, chunk_hits):
        tracer.add(
            [
                h
                for k, hits in zip(indices, chunk_hits, strict=True)
                for h in printed(hits, q_codes[k])
            ]
        )

    bar = _progress_bar(cells, args.progress, "searching")
    start = time.perf_counter()
    try:
        with run.phase("search", cells):
            all_hits = search_many(
                q_codes,
                db,
                top=args.top,
                mode=args.mode,
                scoring=scoring,
                strand=args.strand,
                backend=backend,
                progress=bar.update if bar else None,
                on_ranked=ranked if tracing is not None else None,
            )
    finally:
        if bar:
            bar.close()
        close = getattr(backend, "close", None)  # Dask clusters, hybrid device processes
        if close is not None:
            close()
    elapsed = time.perf_counter() - start
    all_hits = [printed(hits, codes) for codes, hits in zip(q_codes, all_hits, strict=True)]
    rows = []
    if compiling is not None:
        with run.phase("jit"):  # what the child compiled, loaded from Numba's cache
            _finish_traceback_compile(compiling)
            if tracing is None:  # else only the worker processes trace back
                _warm_traceback(scoring, args.mode, traceback_backend(backend), longest)
    with run.phase("traceback"):
        traced = tracer.finish([h for hits in all_hits for h in hits])
        for rec, codes, hits in zip(queries, q_codes, all_hits, strict=True):
            if stats is not None:
                rows.extend(tabular_rows(rec.name, len(codes), hits, stats, db.residues, len(db)))
                continue
            for h in hits:
                q0, q1, t0, t1 = blast_coordinates(h, len(codes))
                tail = f"\t{h.strand}" if strands == 2 else ""
                rows.append(f"{rec.name}\t{h.target}\t{h.score}\t{q0}\t{q1}\t{t0}\t{t1}{tail}\n")
    outputs = {args.out: "".join(rows)}
    total = time.perf_counter() - whole
    if args.report:
        report = {
            "command": "search",
            "settings": {
                "queries": len(queries),
                "targets": len(db),
                "residues": db.residues,
                "cells": cells,
                "mode": args.mode,
                "scoring": _describe_scoring(scoring, args.mode),
                "strand": args.strand,
                "top": args.top,
                "outfmt": args.outfmt,
                "backend": backend.describe(),
                "statistics": stats.source if stats is not None else None,
                "traceback": traced,
            },
            "seconds": total,
            **run.as_dict(),
        }
        outputs[args.report] = json.dumps(report, indent=2) + "\n"
    _write_outputs(outputs)
    print(
        f"dpalign search: {len(queries)} queries x {len(db)} targets = {cells:.3e} cells; "
        f"search {elapsed:.2f} s ({gcups(cells, elapsed):.2f} GCUPS), whole run {total:.2f} s "
        f"({gcups(cells, total):.2f} GCUPS) on {backend.describe()} "
        f"({_describe_scoring(scoring, args.mode)})" + _worker_summary(run),
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


_SUBCOMMANDS = [_add_papara, _add_devices, _add_align, _add_search, _add_bench, _add_serve]


def _join_negative_values(argv: list[str]) -> list[str]:
    """``--scoring -3:-1:2:-3`` as ``--scoring=-3:-1:2:-3``: argparse takes a value that
    starts with '-' (and is not a plain negative number) for an option of its own."""
    out, k = [], 0
    while k < len(argv):
        item = argv[k]
        if (
            item in _NEGATIVE_VALUED
            and k + 1 < len(argv)
            and argv[k + 1][:1] == "-"
            and argv[k + 1][1:2].isdigit()
        ):
            out.append(f"{item}={argv[k + 1]}")
            k += 2
            continue
        out.append(item)
        k += 1
    return out


_NEGATIVE_VALUED = {"--scoring"}


_PARSERS: list[argparse.ArgumentParser | None] = [None]


def main(argv: list[str] | None = None, *, serving: bool = False) -> int:
    """Run one ``dpalign`` command (``argv``: its arguments, else ``sys.argv``'s); its exit
    status. ``serving``: in a ``dpalign serve`` process (search databases are kept)."""
    if serving:  # one parser for every command (building it takes ~5 ms)
        parser = _PARSERS[0] = _PARSERS[0] or build_parser()
    else:
        parser = build_parser()
    args = parser.parse_args(_join_negative_values(sys.argv[1:] if argv is None else list(argv)))
    _SERVING[0] = serving
    _DONE_WITH_NOTHING_OPEN[0] = False
    _setup_logging(args.verbose)
    try:
        return args.run(args)
    except DpalignError as exc:
        print(f"dpalign: error: {_cli_wording(exc)}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("dpalign: interrupted; no output was written", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        sys.stderr.close()
        return EXIT_ERROR


def main_served(argv: list[str]) -> int:
    """:func:`main` in a ``dpalign serve`` process: whatever happens, an exit status, and the
    server goes on (a bug's traceback goes to the client, as it would alone)."""
    try:
        return main(argv, serving=True)
    except SystemExit as exc:  # argparse: --help, a usage error
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else EXIT_ERROR)
    except KeyboardInterrupt:  # before or after the command's own handling
        print("dpalign: interrupted; no output was written", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception:
        import traceback

        traceback.print_exc()
        return EXIT_ERROR


#: Set by a command whose outputs are all written and closed, and that holds nothing a
#: normal exit must tear down (no Dask cluster): :func:`run` may then end the process at once.
_DONE_WITH_NOTHING_OPEN = [False]


def run() -> None:
    """The ``dpalign`` command: :func:`main`, then the exit.

    After a PaPaRa run, the interpreter's normal teardown (its modules, Numba and LLVM, an
    OpenCL context, hundreds of MB of arrays, a device child's join) is time the user waits
    for with nothing left to do, so the process ends with ``os._exit`` once the standard
    streams and the logs are flushed (the output files were closed and renamed into place
    before :func:`main` returned; a device child sees its pipe close and stops).
    """
    code = main()
    if not _DONE_WITH_NOTHING_OPEN[0]:
        sys.exit(code)
    import logging
    import os

    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (BrokenPipeError, ValueError):
        code = code or EXIT_ERROR
    logging.shutdown()
    os._exit(code)


if __name__ == "__main__":
    run()
