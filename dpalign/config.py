"""Tunables, in one place. Environment variables override the defaults where noted."""

from __future__ import annotations

import os

#: Lanes per CPU reference block (the Numba kernels' SIMD group: 32 x int16 = one AVX-512
#: register). Blocks are the unit of work on every backend; GPU workers take many at once.
BLOCK_WIDTH = 32

#: Worker threads for CPU kernels; ``None`` means one per core. Override: DPALIGN_THREADS.
THREADS: int | None = int(os.environ.get("DPALIGN_THREADS") or 0) or None

#: OpenCL device choice, e.g. "0:1" (platform:device) or a name fragment such as "H100".
OPENCL_DEVICE: str | None = os.environ.get("DPALIGN_OPENCL_DEVICE") or None

#: Cells in one hybrid work unit (a chunk of reads against one block): ~0.1 s for a CPU core,
#: so the end of a run waits little for the slowest worker, while each unit's fixed Python
#: cost (which holds the GIL) stays a few percent. With 2e8 (~10 ms units) 16 workers queued
#: on the GIL and starved the GPU thread (H100 host, 2026-11-21: hybrid 618 GCUPS against
#: 257 CPU-only + 2,992 GPU-only).
HYBRID_UNIT_CELLS = 2e9

#: OpenCL PaPaRa kernel design: "strip" (register strips) or "blocked" (the seed paper's
#: blocks). Override: DPALIGN_OPENCL_DESIGN.
OPENCL_DESIGN: str = os.environ.get("DPALIGN_OPENCL_DESIGN") or "strip"

#: Share of an OpenCL device's global memory that one run may fill with batch buffers.
#: Override: DPALIGN_OPENCL_MEMORY_FRACTION.
OPENCL_MEMORY_FRACTION: float = float(os.environ.get("DPALIGN_OPENCL_MEMORY_FRACTION") or 0.5)

#: A large OpenCL PaPaRa call runs in up to this many launches (each at least
#: ``OPENCL_MIN_LAUNCH_CELLS`` cells, ~0.15 s on an H100) rather than one, so the host's work
#: on one launch's scores (widening, writing them out) overlaps the next launch's kernel.
OPENCL_PIPELINE_LAUNCHES = 8
OPENCL_MIN_LAUNCH_CELLS = 500_000_000_000

#: An OpenCL search takes its queries in chunks of at most this many scores
#: ([queries, targets] int64 each; 125 queries against 200,000 targets). The device runs the
#: chunks in one pipeline, so a chunk's size sets the memory held and how much ranking and
#: traceback is left when the last chunk's scores come back, not the device's idle time.
#: Override: DPALIGN_OPENCL_SEARCH_CHUNK_SCORES.
OPENCL_SEARCH_CHUNK_SCORES: int = int(
    os.environ.get("DPALIGN_OPENCL_SEARCH_CHUNK_SCORES") or 25_000_000
)

#: Threads that lay the search's bucket layouts out (NumPy, beside the first launches);
#: None: as many as the programs' build threads. Override:
#: DPALIGN_OPENCL_SEARCH_LAYOUT_THREADS (a benchmark's knob: fewer threads take the GIL from
#: the launching thread less often, more finish the layouts sooner).
OPENCL_SEARCH_LAYOUT_THREADS: int | None = (
    int(os.environ.get("DPALIGN_OPENCL_SEARCH_LAYOUT_THREADS") or 0) or None
)

#: A first run's search programs that the disk cache lacks are compiled by this many child
#: processes beside the command's own share, on GPUs: NVIDIA's driver compiles one program
#: at a time per process whatever the threads (H100 host: one global-mode program 0.54 s,
#: 17 on threads 4.45 s; 17 children at once spent 2.5-2.9 s each starting). With 3
#: children (4 programs each, 0.27-0.68 s a build, ready after 1.0-1.2 s of start-up) the
#: command's own 5 programs took longest (2.9 s after its context, global mode, H100
#: 2026-11-26): 5 children and a share of 3 here balance them. 0: the command builds them
#: all itself. Override: DPALIGN_OPENCL_BUILD_PROCESSES.
OPENCL_BUILD_PROCESSES: int = int(os.environ.get("DPALIGN_OPENCL_BUILD_PROCESSES") or 5)

#: The group search's results come back into page-locked host memory (a pool of the
#: batches' buffers) in submit mode v0 too (the other modes always do so on GPUs).
#: Measured on an H100 (2026-11-26) in v0: the first submit still 0.48 s (it waited for
#: the layouts' and inputs' first use, see OPENCL_SEARCH_SUBMIT), so off unless
#: DPALIGN_OPENCL_SEARCH_PINNED=1.
OPENCL_SEARCH_PINNED: bool = os.environ.get("DPALIGN_OPENCL_SEARCH_PINNED", "0") == "1"

#: How the group search submits a batch (``search_group.SUBMIT_MODES``): "rect" (default)
#: keeps every buffer of the batches, made before the first launch, and reads each launch's
#: results back on its own queue; "v0" is the submit of 2026-11-26's main (new input buffers
#: per batch: NVIDIA's driver gives a buffer memory at its first use and waits for the
#: device there, so each batch's launches waited for the batch before; H100, 1,000 x
#: 200,000 global: device idle 1.07 s of 7.28 against 0.22 of 6.41, bench/
#: search_submit_probe.py). Override: DPALIGN_OPENCL_SEARCH_SUBMIT.
OPENCL_SEARCH_SUBMIT: str = os.environ.get("DPALIGN_OPENCL_SEARCH_SUBMIT") or "rect"
#: How the group search's bucket layouts reach the device: "copy" (default: a blocking copy
#: into each new buffer as it is made, on a queue of the layouts' own) or "create" (buffers
#: made from host memory, which NVIDIA's driver copies at their first use by a launch: the
#: first batch's launches then waited for each other, 0.49-0.55 s to submit against 0.17 s).
#: Override: DPALIGN_OPENCL_SEARCH_UPLOAD.
OPENCL_SEARCH_UPLOAD: str = os.environ.get("DPALIGN_OPENCL_SEARCH_UPLOAD") or "copy"

#: How the host waits for OpenCL kernels: "poll" (sleep between status checks, no spinning
#: core) or "block" (clWaitForEvents, which NVIDIA's driver implements as a busy-wait).
#: Override: DPALIGN_OPENCL_WAIT.
OPENCL_WAIT: str = os.environ.get("DPALIGN_OPENCL_WAIT") or "poll"

#: Compiled OpenCL programs are cached here (DPALIGN_CACHE_DIR); DPALIGN_OPENCL_CACHE=0 disables.
OPENCL_CACHE_DIR: str = os.environ.get("DPALIGN_CACHE_DIR") or "~/.cache/dpalign/opencl"
OPENCL_CACHE: bool = os.environ.get("DPALIGN_OPENCL_CACHE", "1") != "0"

#: Pairs with more DP cells (m * n) than this take the long-pair path (``dpalign.longpair``:
#: tiles on all cores, traceback in near-linear memory). Measured against the short-pair
#: traceback kernel (``simd.traceback.align_pair``) on related DNA pairs (2/-3, gap 5 + 2k,
#: local and global, 2-core AVX-512 machine, load ~1.5): the short kernel is 2.2x faster at
#: 100 x 100, they are even at 200 x 200, the long path is 1.4x faster at 300 x 300, 2.5x at
#: 500 x 500 and 4.6x at 1,000 x 1,000.
LONG_PAIR_CELLS = 40_000

#: PaPaRa scores, traces back and keeps reads in batches whose score matrices (9 bytes per
#: read and edge) stay under this many bytes, so a million reads need no more memory than a
#: batch. Override: DPALIGN_PAPARA_BATCH_BYTES.
PAPARA_BATCH_BYTES: int = int(os.environ.get("DPALIGN_PAPARA_BATCH_BYTES") or 512 << 20)
#: ... and of at most this many reads: the traceback's op layout of a batch takes ~7 KB a
#: read for a moment (a 16-taxon tree's 2-million-read batch would have needed 13 GB).
#: Override: DPALIGN_PAPARA_BATCH_READS.
PAPARA_BATCH_READS: int = int(os.environ.get("DPALIGN_PAPARA_BATCH_READS") or 65_536)
#: Where a device scores (``opencl``, ``hybrid``), the traceback of one batch runs on the
#: cores while the device scores the next; a run is cut into at least this many batches for
#: it (batches of at least PAPARA_OVERLAP_MIN_READS reads). Override:
#: DPALIGN_PAPARA_OVERLAP_BATCHES (1: no cut).
PAPARA_OVERLAP_BATCHES: int = int(os.environ.get("DPALIGN_PAPARA_OVERLAP_BATCHES") or 2)
PAPARA_OVERLAP_MIN_READS: int = int(os.environ.get("DPALIGN_PAPARA_OVERLAP_MIN_READS") or 2_048)
#: ... and the batches taper: each takes half the reads left (down to
#: PAPARA_OVERLAP_MIN_READS), so the last batch, whose traceback nothing hides, is small
#: (the PRANK shape x 2 on two H200s: 0.44 s of traceback after the scoring with two equal
#: halves). Override: DPALIGN_PAPARA_TAPER=0 (equal batches).
PAPARA_TAPER: bool = os.environ.get("DPALIGN_PAPARA_TAPER", "1") != "0"
#: Reads rendered into output rows at a time (a reads x columns byte matrix each).
PAPARA_WRITE_READS = 4_096
#: Threads that render and encode those blocks while the writing thread writes them in
#: order (at most two blocks in flight per thread). Override: DPALIGN_PAPARA_WRITE_THREADS.
PAPARA_WRITE_THREADS: int = int(os.environ.get("DPALIGN_PAPARA_WRITE_THREADS") or 4)

#: ``align(backend="auto")`` runs small pairs in the NumPy oracle (about 2 us a cell here)
#: until this many cells have gone that way, and only then loads the Numba kernels (about a
#: second of imports and cached-kernel loading): ``dpalign align a.fa b.fa`` of short sequences
#: starts in a fraction of a second, and many pairs still reach Numba's speed. The alignments
#: are identical (the kernels are tested against the oracle).
ALIGN_ORACLE_CELLS = 100_000

#: Host workers feeding each OpenCL device in a hybrid run. One: a device worker runs in a
#: process of its own, and two processes on one GPU are two contexts that the GPU time-slices
#: (measured on the H100: the GPU side fell from ~2,860 to ~2,300 GCUPS); the runner already
#: overlaps each batch's copies with the previous batch's kernel.
HYBRID_STREAMS = 1

#: ``auto`` takes the CPU backend alone for work below this many cells per core, even where
#: a GPU exists: a GPU's start in a fresh process (pyopencl, a context, the programs, a device
#: process) takes ~1-2 s, more than the cores need for such work. Measured on the H100 host
#: (16 cores, 3 proteins x 20,000, 3.7e9 cells, whole command in a fresh process): numba
#: 1.64 s, opencl 2.34 s, auto (hybrid) 2.60 s; the cores search at ~390 GCUPS there, the GPU
#: at ~3,000, so the GPU gains from ~5e10 cells a core. Override: DPALIGN_AUTO_CPU_CELLS.
AUTO_CPU_CELLS_PER_CORE = float(os.environ.get("DPALIGN_AUTO_CPU_CELLS") or 2.5e10)
#: The same for PaPaRa's cells (reads x read length x edges x columns), which cost the cores
#: ~3x a search's (~11 GCUPS a core here against ~35). Override: DPALIGN_AUTO_CPU_PAPARA_CELLS.
AUTO_CPU_PAPARA_CELLS_PER_CORE = float(os.environ.get("DPALIGN_AUTO_CPU_PAPARA_CELLS") or 8e9)
#: The same for one long pair with its traceback (tiles on the cores at ~4 GCUPS a core on the
#: H100 host: 1 Mb x 1 Mb in 15.2-16.0 s on 16; the GPU 4.7-7.9 s with its start).
#: Override: DPALIGN_AUTO_CPU_LONGPAIR_CELLS.
AUTO_CPU_LONGPAIR_CELLS_PER_CORE = float(
    os.environ.get("DPALIGN_AUTO_CPU_LONGPAIR_CELLS") or 8e9
)

#: ``auto``/``hybrid`` on a GPU machine: the CPU workers join the devices' work queue only
#: where their measured share of the cells (their rate over everyone's, from this process's
#: earlier runs or from HYBRID_RATES_FILE) is at least this; below it the devices work alone.
#: Measured on the H100 host (PRANK shape, 16 cores): the cores took 5-6% of the cells and
#: the scoring phase was no shorter than the GPU's alone (2.64 against 2.61 s), while loading
#: their kernels and sharing the cores with the traceback made the command 0.3 s longer.
#: At 10% the cores still joined after the scoring kernels got faster (H100, 16 cores, merged
#: tree of 2026-11-26): auto's scoring phase took 2.60 s against opencl's 2.29 s and the whole
#: command 4.87 s against 4.21 s, so the cores must take at least a quarter of the cells.
HYBRID_MIN_CPU_SHARE = 0.25
#: Where the hybrid backend keeps the workers' measured rates (cells per second, per kernel
#: family, CPU count and devices) from run to run, so that a fresh process decides as a warm
#: one would. Override: DPALIGN_HYBRID_RATES_FILE (empty: keep nothing).
HYBRID_RATES_FILE: str = os.environ.get(
    "DPALIGN_HYBRID_RATES_FILE", "~/.cache/dpalign/hybrid_rates.json"
)

#: The smallest take of a hybrid device worker, in reads (against every block): smaller GPU
#: launches lose efficiency (the seed's Table 2 shape is flat from ~2,500 reads on the H100).
HYBRID_DEVICE_MIN_READS = 2_500

#: The fraction of its throughput share of the remaining work that a hybrid device worker takes
#: at once when its rate is known. All of it: a take too small leaves the GPU to finish with
#: small takes, each a round trip and a pipeline fill and drain, while a take too large only
#: leaves CPU cores idle at the end, worth a tenth as much on a GPU machine. Measured on the
#: H100 host (16 workers, warm runs, three machine starts): 1.0 gave 0.934-0.962 of the sum
#: of CPU-only and GPU-only GCUPS, 0.95 gave 0.865-0.945.
HYBRID_DEVICE_SHARE = 1.0
#: Where the devices work alone (no CPU workers) and their rates are known, each device's
#: first take is its share of the whole queue: two GPUs split a batch in one launch each.
#: (With a share of what remains, the second GPU's first take was a quarter, and each GPU
#: went on with ever smaller takes, each a launch's fill and drain.) Override:
#: DPALIGN_HYBRID_WHOLE_SHARE=0.
HYBRID_WHOLE_SHARE: bool = os.environ.get("DPALIGN_HYBRID_WHOLE_SHARE", "1") != "0"

#: Run each hybrid device worker's OpenCL work in a process of its own: in the same process its
#: host work queues on the GIL behind the CPU workers (measured: 0.64-0.79 of the sum of
#: CPU-only and GPU-only on the H100 host; a separate process reaches the sum).
HYBRID_DEVICE_PROCESSES: bool = os.environ.get("DPALIGN_HYBRID_DEVICE_PROCESSES", "1") != "0"

#: How much lower (in nice steps) the hybrid's CPU worker threads run than the threads that
#: feed its GPUs, so a device's host work never waits for a core (see
#: ``hybrid.workers.lower_thread_priority``). 0 turns it off.
HYBRID_CPU_NICE = 10

#: Runs with fewer cells than this show no progress bar.
PROGRESS_MIN_CELLS = 2_000_000_000


def cpu_threads(requested: int | None = None) -> int:
    """Number of CPU worker threads: the request, else DPALIGN_THREADS, else the core count."""
    if requested is not None:
        if requested < 1:
            from .errors import OptionError

            raise OptionError(f"threads must be at least 1, not {requested}", parameter="threads")
        return requested
    if THREADS:
        return THREADS
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1
