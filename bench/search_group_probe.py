"""Probe: a CUDASW++4.0-style protein search kernel (bench/search_group_probe.cl).

Two targets per thread group (16-bit halves of every register), G threads per group holding R
target columns each, query rows streamed one per step as a wavefront across the group, the
substitution score pair of a cell from one local-memory load of a pair table. Targets are
sorted by length and dealt to length buckets, each with the (G, R) whose W = G * R covers its
targets in one pass (or several passes for the longest ones).

    python bench/search_group_probe.py run    [--out DIR] [--device gpu|cpu] [--targets N] ...
    python bench/search_group_probe.py verify --results DIR   # scores vs the CPU oracle
    python bench/search_group_probe.py micro  [--out DIR]     # instruction throughputs (GPU)

``run`` writes ``results.json`` (tables, timings) and ``scores.npz`` (per case / scheme scores
and overflow flags) to DIR; ``verify`` regenerates the same seeded inputs and compares them
with dpalign's Numba search (exact) on this machine, ignoring flagged pairs. On a CPU device
(PoCL) ``run --verify`` checks inline. GCUPS = query length x real target residues / kernel
seconds (OpenCL profiling events; padding and wavefront fill are not counted). With several
queues (variant suffix ``-q8``) buckets overlap and the whole-database figure uses the span
(first kernel start to last kernel end); with ``-q1`` the sum of the bucket kernels.

Variants (``--variants``, dash-separated): ``s16``/``f16``, ``cellN`` (see the .cl),
``wgN`` (work-items per group), ``qN`` (queues), ``imad`` (address by IMAD), ``novirt``
(branch instead of virtual query rows), ``nolds`` (diagnostic: no table loads, wrong scores).

Measured on the H100 (375-aa query, 200,000 targets, BLOSUM62, 11/1, local), see the
session report: per-config peak 3,715 GCUPS (16x16; 4,235 counting padding), whole database
with the "mid" buckets 3,095 (sum of 17 serial kernels) and 2,840-3,620 (8 queues, span,
depending on how much the driver overlaps them); 0 mismatches against the oracle.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from dpalign.benchmarks import workloads  # noqa: E402
from dpalign.scoring import Scoring  # noqa: E402

KERNEL_FILE = HERE / "search_group_probe.cl"
PAD_SCORE = -1000
SCORING = ("BLOSUM62", (11, 1))

# --------------------------------------------------------------------------------------------
# Micro-benchmark source (NVIDIA inline PTX)
# --------------------------------------------------------------------------------------------

MICRO_CL = r"""
#define NCH 8
#define ASM2(ins, d, a, b) asm volatile(ins " %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b))
#define ASM3(ins, d, a, b, c) asm volatile(ins " %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c))
#define OP_addmax(d, x, y) asm volatile("{.reg .b32 t; add.s16x2 t, %1, %2; max.s16x2 %0, t, %3;}" : "=r"(d) : "r"(d), "r"(x), "r"(y))
#define OP_addmaxrelu(d, x, y) asm volatile("{.reg .b32 t; add.s16x2 t, %1, %2; max.s16x2.relu %0, t, %3;}" : "=r"(d) : "r"(d), "r"(x), "r"(y))
#define OP_add(d, x, y) ASM2("add.s16x2", d, d, x)
#define OP_max(d, x, y) ASM2("max.s16x2", d, d, x)
#define OP_umax(d, x, y) ASM2("max.u16x2", d, d, x)
#define OP_maxrelu(d, x, y) ASM2("max.s16x2.relu", d, d, x)
#define OP_max3(d, x, y) asm volatile("{.reg .b32 t; max.s16x2 t, %1, %2; max.s16x2 %0, t, %3;}" : "=r"(d) : "r"(d), "r"(x), "r"(y))
#define OP_max3relu(d, x, y) asm volatile("{.reg .b32 t; max.s16x2.relu t, %1, %2; max.s16x2.relu %0, t, %3;}" : "=r"(d) : "r"(d), "r"(x), "r"(y))
#define OP_iadd(d, x, y) ASM2("add.u32", d, d, x)
#define OP_imad(d, x, y) ASM3("mad.lo.u32", d, d, y, x)
#define OP_lop(d, x, y) ASM2("xor.b32", d, d, x)
#define OP_prmt(d, x, y) ASM3("prmt.b32", d, d, x, y)
#define OP_hadd2(d, x, y) ASM2("add.rn.f16x2", d, d, x)
#define OP_hmax2(d, x, y) ASM2("max.f16x2", d, d, x)
#define OP_hfma2relu(d, x, y) ASM3("fma.rn.relu.f16x2", d, d, y, x)
#define OP_hfma2(d, x, y) ASM3("fma.rn.f16x2", d, d, y, x)
#define OP_ffma(d, x, y) ASM3("fma.rn.f32", d, d, y, x)
#define OP_shfl(d, x, y) asm volatile("shfl.sync.up.b32 %0, %1, 1, %2, 0xffffffff;" : "=r"(d) : "r"(d), "r"(y))
#define OP_lds(d, x, y) do { uint _v = lt[(d & 0x1FFCu) >> 2]; d ^= _v + x; } while (0)
#define OP_ldsadd(d, x, y) do { uint _v = *(__local uint *)((__local uchar *)lt + ((d & 0x1FFCu) + (x & 0x1FFCu))); d ^= _v; } while (0)
#define CAT(a, b) a##b
#define XOP(name, d, x, y) CAT(OP_, name)(d, x, y)

__kernel void micro(__global uint *out, uint seed, int iters) {
    __local uint lt[4096];
    const uint gid = get_global_id(0), lid = get_local_id(0);
    for (uint k = lid; k < 4096; k += get_local_size(0)) lt[k] = k * 2654435761u;
    barrier(CLK_LOCAL_MEM_FENCE);
    uint a[NCH];
    const uint x = seed * 0x10001u + (gid & 7u), y = (seed ^ 0x55u) * 3u + (gid & 3u);
#pragma unroll
    for (int c = 0; c < NCH; c++) a[c] = (gid * 2654435761u) ^ (uint)(c * 40503);
    for (int it = 0; it < iters; it++) {
#pragma unroll
        for (int r = 0; r < 4; r++) {
#pragma unroll
            for (int c = 0; c < NCH; c++) {
                if ((c & 1) == 0) { XOP(OPA, a[c], x, y); } else { XOP(OPB, a[c], x, y); }
            }
        }
    }
    uint acc = 0;
#pragma unroll
    for (int c = 0; c < NCH; c++) acc ^= a[c];
    out[gid] = acc;
}
"""  # noqa: E501

MICRO_OPS = [
    ("ffma", "ffma"),
    ("iadd", "iadd"),
    ("imad", "imad"),
    ("lop", "lop"),
    ("prmt", "prmt"),
    ("addmax", "addmax"),
    ("addmaxrelu", "addmaxrelu"),
    ("add", "add"),
    ("max", "max"),
    ("umax", "umax"),
    ("maxrelu", "maxrelu"),
    ("max3", "max3"),
    ("max3relu", "max3relu"),
    ("hadd2", "hadd2"),
    ("hmax2", "hmax2"),
    ("hfma2", "hfma2"),
    ("hfma2relu", "hfma2relu"),
    ("shfl", "shfl"),
    ("lds", "lds"),
    ("ldsadd", "ldsadd"),
    ("addmax", "iadd"),
    ("addmax", "max"),
    ("addmax", "add"),
    ("addmax", "hadd2"),
    ("addmax", "hmax2"),
    ("addmax", "max3relu"),
    ("max3relu", "add"),
    ("max", "add"),
    ("hmax2", "hadd2"),
    ("hmax2", "hfma2"),
    ("hmax2", "iadd"),
    ("addmax", "lds"),
]


# --------------------------------------------------------------------------------------------
# Devices, programs
# --------------------------------------------------------------------------------------------


def pick_device(kind: str):
    import pyopencl as cl

    found = []
    for plat in cl.get_platforms():
        for dev in plat.get_devices():
            found.append((plat, dev))
    if kind == "gpu":
        for plat, dev in found:
            if "NVIDIA" in plat.name:
                return dev
    if kind == "cpu":
        for _plat, dev in found:
            if dev.type & cl.device_type.CPU:
                return dev
    for plat, dev in found:
        if "NVIDIA" in plat.name:
            return dev
    return found[0][1]


class Device:
    def __init__(self, kind: str):
        import pyopencl as cl

        self.cl = cl
        self.dev = pick_device(kind)
        self.ctx = cl.Context([self.dev])
        self.queue = cl.CommandQueue(
            self.ctx, properties=cl.command_queue_properties.PROFILING_ENABLE
        )
        self.nvidia = "NVIDIA" in self.dev.platform.name
        self.is_cpu = bool(self.dev.type & cl.device_type.CPU)
        self.cus = self.dev.max_compute_units
        self.local_mem = self.dev.local_mem_size
        self.programs: dict = {}
        self.build_seconds = 0.0

    def describe(self) -> str:
        return (
            f"{self.dev.name} ({self.dev.platform.name}, {self.cus} CUs, "
            f"{self.local_mem // 1024} KiB local, driver {self.dev.driver_version})"
        )

    def program(self, defines: dict, source: str | None = None):
        cl = self.cl
        text = source if source is not None else KERNEL_FILE.read_text()
        opts = ["-cl-std=CL1.2"] + [f"-D{k}={v}" for k, v in sorted(defines.items())]
        key = (hash(text), tuple(opts))
        if key not in self.programs:
            start = time.perf_counter()
            prg = cl.Program(self.ctx, text).build(options=opts)
            self.build_seconds += time.perf_counter() - start
            self.programs[key] = prg
        return self.programs[key]


# --------------------------------------------------------------------------------------------
# Inputs: scoring, compact alphabets, tables
# --------------------------------------------------------------------------------------------


def encode(scoring: Scoring, seqs):
    lut = scoring.alphabet.lut
    return [lut[np.frombuffer(s.encode(), np.uint8)].astype(np.uint8) for s in seqs]


@dataclass
class Problem:
    """One query against targets, with the compact alphabets and the pair table."""

    query: np.ndarray
    targets: list
    scoring: Scoring
    local: bool
    lengths: np.ndarray = field(init=False)
    tl: np.ndarray = field(init=False)  # compact target letter -> code
    L: int = field(init=False)
    tmap: np.ndarray = field(init=False)  # code -> compact target letter
    ql: np.ndarray = field(init=False)
    qoff: np.ndarray = field(init=False)

    def __post_init__(self):
        self.lengths = np.fromiter((len(t) for t in self.targets), np.int64, len(self.targets))
        used = np.zeros(256, bool)
        for t in self.targets:
            used[t] = True
        self.tl = np.flatnonzero(used)
        self.L = len(self.tl) + 1  # + the padding letter
        self.tmap = np.full(256, len(self.tl), np.int64)
        self.tmap[self.tl] = np.arange(len(self.tl))
        self.ql, qc = np.unique(self.query, return_inverse=True)
        self.qoff = (qc * self.L * self.L * 4).astype(np.int32)

    @property
    def m(self) -> int:
        return len(self.query)

    @property
    def table_words(self) -> int:
        return len(self.ql) * self.L * self.L

    def table(self, arith: int, cell: int, virt: bool = False) -> np.ndarray:
        """The pair table [query letters (+ one virtual row of PAD_SCORE)][L * L]."""
        sc = self.scoring
        o, e = sc.gap_open, sc.gap_extend
        rows = len(self.ql) + int(virt)
        sub = np.full((rows, self.L), PAD_SCORE, np.int64)
        sub[: len(self.ql), : len(self.tl)] = sc.matrix[np.ix_(self.ql, self.tl)]
        if arith == 0 and cell == 1:
            sub = np.where(sub == PAD_SCORE, PAD_SCORE, sub + o + e)
        if arith == 1:
            bits = sub.astype(np.float16).view(np.uint16).astype(np.uint32)
        else:
            bits = (sub & 0xFFFF).astype(np.uint32)
        lo = bits[:, :, None]
        hi = bits[:, None, :]
        return (lo | (hi << 16)).reshape(rows, -1).astype(np.uint32).ravel()


def f16_bits(x: float) -> int:
    b = int(np.array([x], np.float16).view(np.uint16)[0])
    return b | (b << 16)


# --------------------------------------------------------------------------------------------
# Buckets
# --------------------------------------------------------------------------------------------


@dataclass
class Bucket:
    G: int
    R: int
    passes: int
    targets: np.ndarray  # target indices, length-sorted, paired consecutively

    @property
    def W(self) -> int:
        return self.G * self.R

    @property
    def npairs(self) -> int:
        return -(-len(self.targets) // 2)


def parse_configs(text: str):
    out = []
    for item in text.split(","):
        g, r = item.strip().lower().split("x")
        out.append((int(g), int(r)))
    return out


#: Bucket schemes: single-pass configs (G x R), then the multi-pass config.
SCHEMES = {
    "r16": ("4x16,8x16,16x16,32x16", "32x16"),
    "r32": ("4x32,8x32,16x32,32x32", "32x32"),
    "g8": ("8x8,8x12,8x16,8x20,8x24,8x28,8x32", "8x32"),
    "fine": (
        "4x8,4x12,4x16,8x10,8x12,8x14,8x16,8x20,8x24,8x28,8x32,16x20,16x24,16x28,"
        "16x32,32x24,32x28,32x32",
        "32x32",
    ),
    "fine16": (
        "4x8,4x12,4x16,8x10,8x12,8x14,8x16,8x20,8x24,8x28,8x32,16x20,16x24,16x28,16x32",
        "16x32",
    ),
    "mid": (
        "4x16,8x12,8x16,8x20,8x24,8x28,8x32,16x20,16x24,16x28,16x32,32x20,32x24,32x28,32x32",
        "32x32",
    ),
    "g16": ("4x16,8x12,8x16,8x20,8x24,16x12,16x16,16x20,16x24,32x12,32x16,32x20,32x24", "32x24"),
    "g16r16": ("4x16,8x12,8x16,16x12,16x16,32x12,32x16", "32x16"),
    "fine2": (
        ",".join(
            [f"4x{r}" for r in range(8, 17, 2)]
            + [f"8x{r}" for r in range(10, 33, 2)]
            + [f"16x{r}" for r in range(18, 33, 2)]
            + [f"32x{r}" for r in range(18, 33, 2)]
        ),
        "32x32",
    ),
    "fine3": (
        ",".join(
            [f"4x{r}" for r in range(8, 17, 2)]
            + [f"8x{r}" for r in range(10, 25, 2)]
            + [f"16x{r}" for r in range(14, 25, 2)]
            + [f"32x{r}" for r in range(14, 25, 2)]
        ),
        "32x24",
    ),
}


def plan_buckets(
    lengths: np.ndarray, m: int, configs, multi, overhead: float = 3.0, min_targets: int = 0
):
    """Deal targets to (G, R, passes) buckets by least estimated cost (padded cells, the
    wavefront's fill, a per-step overhead of ``overhead`` cells per thread). Single-pass
    configs that would get fewer than ``min_targets`` targets are dropped (their targets go
    to the next cheapest config), repeatedly."""
    configs = [(g, r) for g, r in configs]
    while True:
        buckets = _plan(lengths, m, configs, multi, overhead)
        small = [
            b
            for b in buckets
            if b.passes == 1 and (b.G, b.R) != multi and len(b.targets) < min_targets
        ]
        if not small:
            return buckets
        drop = min(small, key=lambda b: len(b.targets))
        configs.remove((drop.G, drop.R))


def _plan(lengths, m, configs, multi, overhead):
    options = [(g, r) for g, r in configs]
    if multi not in options:
        options.append(multi)
    n = np.asarray(lengths, np.int64)
    best_cost = np.full(len(n), np.inf)
    choice = np.zeros(len(n), np.int64)
    npass = np.ones(len(n), np.int64)
    for k, (g, r) in enumerate(options):
        w = g * r
        passes = np.maximum(1, -(-n // w))
        if (g, r) != multi:
            ok = passes == 1
        else:
            ok = np.ones(len(n), bool)
        cost = passes * w * (m + g - 1) * (1 + overhead / r)
        cost = np.where(ok, cost, np.inf)
        better = cost < best_cost
        best_cost[better] = cost[better]
        choice[better] = k
        npass[better] = passes[better]
    buckets = []
    order = np.argsort(-n, kind="stable")
    for k, (g, r) in enumerate(options):
        for p in np.unique(npass[choice == k]):
            sel = order[(choice[order] == k) & (npass[order] == p)]
            if len(sel):
                buckets.append(Bucket(g, r, int(p), sel))
    return buckets


def pack_bucket(problem: Problem, b: Bucket):
    """Column pair offsets [npairs, passes * W] (uint16) and lengths [npairs, 2] (int32)."""
    wt = b.passes * b.W
    L = problem.L
    pad = L - 1
    tg = b.targets
    if len(tg) % 2:
        tg = np.concatenate([tg, [-1]])
    npairs = len(tg) // 2
    A = np.full((npairs * 2, wt), pad, np.int64)
    lens = np.zeros(npairs * 2, np.int64)
    real = tg >= 0
    idx = np.flatnonzero(real)
    if len(idx):
        lens[idx] = problem.lengths[tg[idx]]
        flat = np.concatenate([problem.targets[t] for t in tg[idx]])
        rows = np.repeat(idx, lens[idx])
        starts = np.concatenate([[0], np.cumsum(lens[idx])[:-1]])
        colpos = np.arange(len(flat)) - np.repeat(starts, lens[idx])
        A[rows, colpos] = problem.tmap[flat]
    A = A.reshape(npairs, 2, wt)
    cols = ((A[:, 0] * L + A[:, 1]) * 4).astype(np.uint16)
    return np.ascontiguousarray(cols), lens.reshape(npairs, 2).astype(np.int32), tg


# --------------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------------


@dataclass
class Variant:
    cell: int = 2
    arith: int = 0
    wg: int = 128
    wgs_per_cu: int = 16  # cap on work-groups per compute unit (persistent loop beyond)
    queues: int = 1  # command queues the buckets are spread over (concurrent kernels)
    addr_imad: int = 0
    nolds: int = 0  # diagnostic: no table loads (wrong scores)
    virt: int = 1  # local mode: virtual query rows instead of a branch per step

    @property
    def name(self) -> str:
        name = f"{'f16' if self.arith else 's16'}-cell{self.cell}-wg{self.wg}-q{self.queues}"
        if self.addr_imad:
            name += "-imad"
        if self.nolds:
            name += "-nolds"
        if not self.virt:
            name += "-novirt"
        return name


def variant_from(text: str) -> Variant:
    v = Variant()
    for part in text.split("-"):
        if part == "f16":
            v.arith = 1
        elif part == "s16":
            v.arith = 0
        elif part.startswith("cell"):
            v.cell = int(part[4:])
        elif part.startswith("wg"):
            v.wg = int(part[2:])
        elif part.startswith("cap"):
            v.wgs_per_cu = int(part[3:])
        elif part.startswith("q") and part[1:].isdigit():
            v.queues = int(part[1:])
        elif part == "imad":
            v.addr_imad = 1
        elif part == "nolds":
            v.nolds = 1
        elif part == "novirt":
            v.virt = 0
    return v


class Runner:
    def __init__(self, device: Device, problem: Problem, variant: Variant):
        self.d = device
        self.p = problem
        self.v = variant
        cl = device.cl
        mf = cl.mem_flags
        self.ptx = device.nvidia
        if variant.arith == 1 and not self.ptx:
            raise RuntimeError("f16 arithmetic needs NVIDIA inline PTX")
        self.virt = int(variant.virt and problem.local)
        tab = problem.table(variant.arith, variant.cell, bool(self.virt))
        self.ntab = len(tab)
        self.virt_off = len(problem.ql) * problem.L * problem.L * 4
        self.tab_buf = cl.Buffer(device.ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=tab)
        self.q_buf = cl.Buffer(
            device.ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=problem.qoff.astype(np.int32)
        )
        need = self.ntab * 4 + (problem.m + 64) * 4 + (0 if self.ptx else 8 * variant.wg)
        if need > device.local_mem:
            raise RuntimeError(f"pair table + query need {need} bytes of local memory")
        self.packed: dict = {}

    def defines(self, b: Bucket) -> dict:
        return {
            "G": b.G,
            "R": b.R,
            "WG": self.v.wg,
            "USE_PTX": int(self.ptx),
            "ARITH": self.v.arith,
            "CELL": self.v.cell,
            "LOCAL_MODE": int(self.p.local),
            "MULTI": int(b.passes > 1),
            "TAB_WORDS": self.ntab,
            "QMAX": self.p.m + 2 * b.G,
            "VIRT": self.virt,
            "ADDR_IMAD": self.v.addr_imad,
            "DIAG_NOLDS": self.v.nolds,
        }

    def kernel(self, b: Bucket):
        prg = self.d.program(self.defines(b))
        return self.d.cl.Kernel(prg, "group_search")

    def upload(self, b: Bucket):
        key = (b.G, b.R, b.passes, b.targets[0], len(b.targets))
        if key not in self.packed:
            cl = self.d.cl
            mf = cl.mem_flags
            cols, lens, tg = pack_bucket(self.p, b)
            self.packed[key] = (
                cl.Buffer(self.d.ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=cols),
                cl.Buffer(self.d.ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=lens),
                tg,
                len(lens),
            )
        return self.packed[key]

    def queues(self):
        d = self.d
        while len(getattr(d, "extra_queues", [])) < self.v.queues:
            if not hasattr(d, "extra_queues"):
                d.extra_queues = [d.queue]
                continue
            d.extra_queues.append(
                d.cl.CommandQueue(d.ctx, properties=d.cl.command_queue_properties.PROFILING_ENABLE)
            )
        return d.extra_queues[: self.v.queues]

    def enqueue_bucket(self, b: Bucket, queue):
        """Launch one bucket on ``queue``; return (event, out buffer, npairs, tg)."""
        cl = self.d.cl
        cols_buf, lens_buf, tg, npairs = self.upload(b)
        kern = self.kernel(b)
        groups_per_wg = self.v.wg // b.G
        wgs = -(-npairs // groups_per_wg)
        wgs = max(1, min(wgs, self.d.cus * self.v.wgs_per_cu))
        gsize = wgs * self.v.wg
        out_buf = cl.Buffer(self.d.ctx, cl.mem_flags.READ_WRITE, npairs * 16)
        if b.passes > 1:
            carry = cl.Buffer(self.d.ctx, cl.mem_flags.READ_WRITE, (gsize // b.G) * self.p.m * 8)
        else:
            carry = cl.Buffer(self.d.ctx, cl.mem_flags.READ_WRITE, 8)
        sc = self.p.scoring
        o, e = sc.gap_open, sc.gap_extend
        kern.set_args(
            cols_buf,
            self.tab_buf,
            self.q_buf,
            lens_buf,
            out_buf,
            carry,
            np.int32(npairs),
            np.int32(self.p.m),
            np.int32(b.passes),
            np.int32(self.ntab),
            np.int32(o),
            np.int32(e),
            np.uint32(f16_bits(-e)),
            np.uint32(f16_bits(-(o + e))),
            np.uint32(f16_bits(1.0)),
            np.uint32(1),
            np.int32(self.virt_off),
        )
        ev = cl.enqueue_nd_range_kernel(queue, kern, (gsize,), (self.v.wg,))
        return ev, out_buf, npairs, tg, carry

    def decode(self, raw: np.ndarray) -> np.ndarray:
        raw16 = (raw & 0xFFFF).astype(np.uint16)
        if self.v.arith == 1:
            return raw16.view(np.float16).astype(np.float64).astype(np.int64)
        return raw16.view(np.int16).astype(np.int64)

    def flag_limit(self) -> int:
        smax = int(self.p.scoring.matrix.max())
        if self.v.arith == 1:
            return 2048 - smax - 8
        return 32767 - smax - 64

    def run(self, buckets):
        """Scores of every target (int64), flags, per-bucket seconds and the span of all
        launches (first start to last end: with several queues, buckets overlap)."""
        cl = self.d.cl
        n = len(self.p.targets)
        scores = np.zeros(n, np.int64)
        maxh = np.zeros(n, np.int64)
        queues = self.queues()
        # the longest-latency buckets first (passes x wavefront steps), then the biggest
        order = sorted(
            range(len(buckets)),
            key=lambda k: (
                -buckets[k].passes * (self.p.m + buckets[k].G),
                -len(buckets[k].targets),
            ),
        )
        for b in buckets:  # build and pack before timing
            self.kernel(b)
            self.upload(b)
        launched = {}
        for j, k in enumerate(order):
            launched[k] = self.enqueue_bucket(buckets[k], queues[j % len(queues)])
        for q in queues:
            q.finish()
        seconds = [0.0] * len(buckets)
        starts, ends = [], []
        for k, (ev, out_buf, npairs, tg, _carry) in launched.items():
            seconds[k] = (ev.profile.end - ev.profile.start) * 1e-9
            starts.append(ev.profile.start)
            ends.append(ev.profile.end)
            raw = np.empty((npairs, 4), np.uint32)
            cl.enqueue_copy(self.d.queue, raw, out_buf)
            vals = self.decode(raw)  # [npairs, 4]
            sc = vals[:, :2].reshape(-1)
            mh = vals[:, 2:].reshape(-1)
            ok = tg >= 0
            scores[tg[ok]] = sc[ok]
            maxh[tg[ok]] = mh[ok]
        span = (max(ends) - min(starts)) * 1e-9 if starts else 0.0
        flagged = maxh >= self.flag_limit()
        return scores, flagged, seconds, span


def timed(runner: Runner, buckets, repeats: int):
    """Best-of-``repeats`` round (by span): scores, flags, per-bucket seconds, span."""
    best = None
    for _ in range(repeats):
        scores, flagged, secs, span = runner.run(buckets)
        if best is None or span < best[3]:
            best = (scores, flagged, secs, span)
    return best


# --------------------------------------------------------------------------------------------
# Cases (seeded, regenerated by `verify`)
# --------------------------------------------------------------------------------------------


def database(n: int):
    sc = Scoring(*SCORING)
    db = workloads.protein_database(n)
    return encode(sc, [s for _, s in db]), encode(sc, [workloads.protein_query(375)])[0]


def small_cases():
    """Random sequences of length 1..40 (20 letters + X), and extreme cases."""
    sc = Scoring(*SCORING)
    rng = np.random.default_rng(40)
    letters = np.frombuffer(b"ARNDCQEGHILKMFPSTWYVX", np.uint8)
    lut = sc.alphabet.lut

    def rand(n):
        return lut[rng.choice(letters, n)].astype(np.uint8)

    cases = {}
    for qlen in (1, 2, 7, 23, 40):
        q = rand(qlen)
        cases[f"rand-q{qlen}"] = (q, [rand(int(rng.integers(1, 41))) for _ in range(400)])
    _, query = database(1)
    q = query
    ident = [
        q.copy(),
        q[:200].copy(),
        q[100:].copy(),
        np.concatenate([q, q]),
        np.concatenate([q, q, q, q, q]),  # 1,875: multi-pass, high score
        np.concatenate([rand(500), q, rand(700)]),
        np.concatenate([q[::-1], rand(50)]),
        np.full(375, lut[ord("W")], np.uint8),
        rand(1),
        rand(3000),
    ]
    ident += [rand(int(rng.integers(1, 41))) for _ in range(50)]
    cases["extreme-q375"] = (q, ident)
    wq = np.full(375, lut[ord("W")], np.uint8)
    cases["extreme-qW"] = (wq, [wq.copy(), np.full(3000, lut[ord("W")], np.uint8), q.copy()])
    # 16-bit overflow: 3,000 x W against itself scores 33,000 (flagged, not compared)
    w3 = np.full(3000, lut[ord("W")], np.uint8)
    cases["overflow-qW3000"] = (w3, [w3.copy(), w3[:2000].copy(), rand(300), q.copy()])
    return cases


# --------------------------------------------------------------------------------------------
# Oracle (CPU: dpalign's Numba search, exact)
# --------------------------------------------------------------------------------------------


def oracle(query, targets, mode: str, cache: Path | None = None):
    if cache is not None and cache.exists():
        return np.load(cache)
    from dpalign.engine import Task, get_backend, query_batch, reference_blocks
    from dpalign.scoring import free_ends_tuple

    sc = Scoring(*SCORING)
    lengths = np.array([len(t) for t in targets])
    blocks = reference_blocks(targets, order=np.argsort(-lengths, kind="stable"))
    be = get_backend("numba")
    task = Task("pairwise", sc, mode, free_ends_tuple(mode))
    res = be.score(task, query_batch([query]), blocks)
    got = np.zeros(len(targets), np.int64)
    for b, r in zip(blocks, res, strict=True):
        lanes = b.ids >= 0
        got[b.ids[lanes]] = r.scores[0, lanes]
    if cache is not None:
        np.save(cache, got)
    return got


def compare(got, flagged, want):
    bad = (got != want) & ~flagged
    return int(bad.sum()), int(flagged.sum()), np.flatnonzero(bad)[:10].tolist()


# --------------------------------------------------------------------------------------------
# Commands
# --------------------------------------------------------------------------------------------


def run(args) -> int:
    dev = Device(args.device)
    print(dev.describe(), flush=True)
    sc = Scoring(*SCORING)
    modes = args.modes.split(",")
    variants = [variant_from(v) for v in args.variants.split(",")]
    if dev.is_cpu:
        variants = [v for v in variants if v.arith == 0]
        for v in variants:
            v.wg = min(v.wg, 64)
    out = Path(args.out) if args.out else None
    if out:
        out.mkdir(parents=True, exist_ok=True)
    results = {"device": dev.describe(), "tables": [], "checks": []}
    saved = {}
    t0 = time.perf_counter()
    targets, query = database(args.targets)
    lengths = np.array([len(t) for t in targets])
    residues = int(lengths.sum())
    m = len(query)
    print(
        f"{len(targets)} targets, {residues} residues, query {m}; "
        f"prepared in {time.perf_counter() - t0:.1f} s",
        flush=True,
    )

    inline = args.verify

    def check(name, got, flagged, q, tg, mode, subset=None):
        rec = {"case": name, "mode": mode, "flagged": int(flagged.sum())}
        if subset is not None:  # only these targets were scored
            saved[f"{name}|{mode}|subset"] = subset.astype(np.int32)
            got, flagged = got[subset], flagged[subset]
        saved[f"{name}|{mode}|scores"] = got.astype(np.int32)
        saved[f"{name}|{mode}|flagged"] = flagged
        if inline:
            want = oracle(q, tg, mode)
            if subset is not None:
                want = want[subset]
            bad, nf, first = compare(got, flagged, want)
            rec.update(mismatches=bad, first_bad=first)
        results["checks"].append(rec)
        print(json.dumps(rec), flush=True)

    # 1. small and extreme cases, every variant and mode
    small_variants = variants
    if args.small_variants:
        wanted = [variant_from(x) for x in args.small_variants.split(",")]
        if dev.is_cpu:
            for w in wanted:
                w.wg = min(w.wg, 64)
        small_variants = [v for v in variants if v.name in {w.name for w in wanted}]
    if not args.skip_small:
        for cname, (q, tg) in small_cases().items():
            for mode in modes:
                for v in small_variants:
                    if v.arith == 1 and mode != "local":
                        continue
                    prob = Problem(q, tg, sc, mode == "local")
                    try:
                        runner = Runner(dev, prob, v)
                        buckets = plan_buckets(
                            prob.lengths, prob.m, *scheme_configs(args.small_scheme)
                        )
                        got, flagged, _, _ = runner.run(buckets)
                    except Exception as exc:  # noqa: BLE001
                        print(f"FAILED {cname} {v.name} {mode}: {str(exc)[:1500]}", flush=True)
                        results["checks"].append(
                            {"case": cname, "variant": v.name, "error": str(exc)[:1500]}
                        )
                        continue
                    check(f"{cname}|{v.name}", got, flagged, q, tg, mode)

    # 2. per-(G, R) configs on the database: targets that fit one pass with W/4 slack
    for mode in modes:
        prob = Problem(query, targets, sc, mode == "local")
        for v in variants:
            if v.arith == 1 and mode != "local":
                continue
            try:
                db_variant(args, dev, prob, v, mode, results, check)
            except Exception as exc:  # noqa: BLE001
                print(f"FAILED {v.name} {mode}: {str(exc)[:1500]}", flush=True)
                results["tables"].append(
                    {"table": "error", "variant": v.name, "mode": mode, "error": str(exc)[:1500]}
                )
            if out:  # after every variant: a run cut short still leaves its results
                (out / "results.json").write_text(json.dumps(results, indent=1))
                np.savez_compressed(out / "scores.npz", **saved)
    results["build_seconds"] = dev.build_seconds
    results["wall_seconds"] = time.perf_counter() - t0
    if args.sass and dev.nvidia:
        results["sass"] = dump_sass(dev, out, args.sass)
    if out:
        (out / "results.json").write_text(json.dumps(results, indent=1))
        np.savez_compressed(out / "scores.npz", **saved)
    summary(results)
    bad = sum(c.get("mismatches", 0) for c in results["checks"])
    return 1 if bad else 0


def db_variant(args, dev, prob, v, mode, results, check):
    """Per-(G, R) configs and whole-database bucket schemes for one variant and mode."""
    runner = Runner(dev, prob, v)
    lengths, m, query, targets = prob.lengths, prob.m, prob.query, prob.targets
    residues = int(lengths.sum())
    for g, r in parse_configs(args.configs) if args.configs else []:
        w = g * r
        sel = np.flatnonzero((lengths > w - w // 4) & (lengths <= w))
        sel = sel[np.argsort(-lengths[sel], kind="stable")]
        if len(sel) < 2:
            continue
        b = [Bucket(g, r, 1, sel)]
        scores, flagged, secs, span = timed(runner, b, args.repeats)
        real = m * int(lengths[sel].sum())
        padded = m * w * 2 * b[0].npairs
        row = {
            "table": "config",
            "mode": mode,
            "variant": v.name,
            "G": g,
            "R": r,
            "W": w,
            "targets": len(sel),
            "seconds": sum(secs),
            "gcups": real / sum(secs) / 1e9,
            "gcups_padded": padded / sum(secs) / 1e9,
        }
        check(f"db{args.targets}|{v.name}|cfg{g}x{r}", scores, flagged, query, targets, mode, sel)
        results["tables"].append(row)
        print(json.dumps(row), flush=True)
    # 3. whole database per bucket scheme
    for sname in args.schemes.split(","):
        configs, multi = scheme_configs(sname)
        buckets = plan_buckets(lengths, m, configs, multi, args.overhead, args.min_targets)
        scores, flagged, secs, span = timed(runner, buckets, args.repeats)
        padded = sum(m * 2 * b.npairs * b.W * b.passes for b in buckets)
        row = {
            "table": "scheme",
            "mode": mode,
            "variant": v.name,
            "scheme": sname,
            "buckets": len(buckets),
            "seconds": sum(secs),
            "span": span,
            "gcups": m * residues / sum(secs) / 1e9,
            "gcups_span": m * residues / span / 1e9,
            "padding_efficiency": m * residues / padded,
            "flagged": int(flagged.sum()),
            "per_bucket": [
                {
                    "G": b.G,
                    "R": b.R,
                    "passes": b.passes,
                    "targets": len(b.targets),
                    "ms": s * 1e3,
                    "gcups": m * int(lengths[b.targets].sum()) / s / 1e9,
                }
                for b, s in zip(buckets, secs, strict=True)
            ],
        }
        results["tables"].append(row)
        short = {k: row[k] for k in row if k != "per_bucket"}
        print(json.dumps(short), flush=True)
        check(f"db{args.targets}|{v.name}|{sname}", scores, flagged, query, targets, mode)


def scheme_configs(name: str):
    if name in SCHEMES:
        single, multi = SCHEMES[name]
    else:  # "4x16,8x16/32x16"
        single, multi = name.split("/")
    return parse_configs(single), parse_configs(multi)[0]


def summary(results):
    rows = [r for r in results["tables"] if r["table"] in ("config", "scheme")]
    if not rows:
        return
    print("\n| table | mode | variant | config/scheme | GCUPS | padded GCUPS / efficiency | ms |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        if r["table"] == "config":
            print(
                f"| config | {r['mode']} | {r['variant']} | {r['G']}x{r['R']} | "
                f"{r['gcups']:.0f} | {r['gcups_padded']:.0f} | {r['seconds'] * 1e3:.2f} |"
            )
        else:
            print(
                f"| scheme | {r['mode']} | {r['variant']} | {r['scheme']} | "
                f"{r['gcups']:.0f} (span {r['gcups_span']:.0f}) | "
                f"{r['padding_efficiency']:.3f} | {r['seconds'] * 1e3:.2f} "
                f"(span {r['span'] * 1e3:.2f}) |"
            )
    bad = sum(c.get("mismatches", 0) for c in results["checks"])
    print(f"checks: {len(results['checks'])}, mismatches (inline): {bad}", flush=True)


def verify(args) -> int:
    folder = Path(args.results)
    data = np.load(folder / "scores.npz")
    cases = small_cases()
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    total_bad = 0
    keys = sorted({k.rsplit("|", 1)[0] for k in data.files})  # name|mode
    for key in keys:
        got = data[key + "|scores"]
        flagged = data[key + "|flagged"]
        parts = key.split("|")
        if "-nolds" in key:  # the diagnostic variant computes wrong scores on purpose
            print(f"{key}: diagnostic (no table loads), not compared")
            continue
        mode = parts[-1]
        cname = parts[0]
        if cname.startswith("db"):
            n = int(cname[2:])
            targets, query = database(n)
            want = oracle(query, targets, mode, cache / f"oracle_db{n}_{mode}.npy")
            if key + "|subset" in data.files:
                want = want[data[key + "|subset"]]
        else:
            q, tg = cases[cname]
            want = oracle(q, tg, mode, cache / f"oracle_{cname}_{mode}.npy")
        bad, nf, first = compare(got, flagged, want)
        total_bad += bad
        extra = ""
        if bad:
            extra = f" first {first}: got {got[first[:3]].tolist()} want {want[first[:3]].tolist()}"
        print(f"{key}: {len(got)} pairs, {bad} mismatches, {nf} flagged{extra}")
    print(f"total mismatches: {total_bad}")
    return 1 if total_bad else 0


def micro(args) -> int:
    dev = Device("gpu")
    print(dev.describe(), flush=True)
    cl = dev.cl
    iters = args.iters
    wg = 256
    gsize = dev.cus * 8 * wg
    out_buf = cl.Buffer(dev.ctx, cl.mem_flags.READ_WRITE, gsize * 4)
    rows = []
    ref = None
    for opa, opb in MICRO_OPS:
        try:
            prg = dev.program({"OPA": opa, "OPB": opb}, MICRO_CL)
        except Exception as exc:  # noqa: BLE001
            print(f"{opa}+{opb}: build failed {str(exc)[:300]}")
            continue
        kern = cl.Kernel(prg, "micro")
        times = []
        for _ in range(3):
            ev = kern(dev.queue, (gsize,), (wg,), out_buf, np.uint32(3), np.int32(iters))
            ev.wait()
            times.append((ev.profile.end - ev.profile.start) * 1e-9)
        s = min(times)
        ops = gsize * iters * 4 * 8  # lane-ops
        warp_ips = ops / 32 / s  # warp instructions per second (whole GPU)
        if ref is None:
            ref = warp_ips / (4 * dev.cus)  # ffma: 4 warp-instr / clk / SM -> clock
        per_sm_clk = warp_ips / dev.cus / ref
        row = {"ops": f"{opa}+{opb}", "ms": s * 1e3, "warp_instr_per_clk_per_SM": per_sm_clk}
        rows.append(row)
        print(
            f"{opa:>11s}+{opb:<11s} {s * 1e3:8.3f} ms  {per_sm_clk:6.3f} warp-instr/clk/SM "
            f"({per_sm_clk / 4:5.3f} per sub-partition)",
            flush=True,
        )
    print(f"(clock from ffma = 4 warp-instr/clk/SM: {ref / 1e9:.3f} GHz)")
    sass = {}
    if shutil.which("ptxas") and args.out:
        folder = Path(args.out)
        folder.mkdir(parents=True, exist_ok=True)
        for opa, opb in [
            ("addmax", "addmax"),
            ("max3relu", "max3relu"),
            ("addmaxrelu", "add"),
            ("hmax2", "hfma2relu"),
            ("umax", "max"),
        ]:
            prg = dev.program({"OPA": opa, "OPB": opb}, MICRO_CL)
            ops = sass_ops(prg.binaries[0], folder / f"micro_{opa}_{opb}")
            sass[f"{opa}+{opb}"] = ops
            print(opa, opb, ops)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "micro.json").write_text(json.dumps({"rows": rows, "sass": sass}))
    return 0


def sass_ops(ptx: bytes, stem: Path, keep: bool = False) -> dict:
    ptx_path = stem.with_suffix(".ptx")
    ptx_path.write_bytes(ptx.rstrip(b"\0"))
    cubin = stem.with_suffix(".cubin")
    info = subprocess.run(
        ["ptxas", "-arch=sm_90", "-v", "-o", str(cubin), str(ptx_path)],
        capture_output=True,
        text=True,
    )
    ops: dict = {"_ptxas": info.stderr.strip()[-400:]}
    if shutil.which("cuobjdump") and cubin.exists():
        sass = subprocess.run(["cuobjdump", "-sass", str(cubin)], capture_output=True, text=True)
        if keep:
            stem.with_suffix(".sass").write_text(sass.stdout)
        for line in sass.stdout.splitlines():
            parts = line.split("*/")
            if len(parts) > 1 and parts[1].strip():
                words = parts[1].split()
                op = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
                op = op.rstrip(";")
                ops[op] = ops.get(op, 0) + 1
    for f in (ptx_path, cubin):
        if f.exists() and not keep:
            f.unlink()
    return dict(sorted(ops.items(), key=lambda kv: -kv[1] if isinstance(kv[1], int) else 0))


def dump_sass(dev: Device, out: Path | None, which: str = "G=16,R=16") -> dict:
    """SASS opcode counts of the built programs whose -D options include every item of
    ``which``; the full SASS of the single-pass local ones go to OUT/sass.txt (one file: the
    tool brings back few files)."""
    want = [w for w in which.split(",") if "=" in w]
    if not shutil.which("ptxas") or out is None:
        return {}
    folder = Path("/tmp/search_group_sass")
    folder.mkdir(exist_ok=True)
    summary_ = {}
    texts = []
    for (_, opts), prg in dev.programs.items():
        tag = "_".join(
            o[2:]
            for o in opts
            if o.startswith("-D")
            and o.split("=")[0][2:] in ("G", "R", "CELL", "ARITH", "LOCAL_MODE", "MULTI", "VIRT")
        )
        if not all(f"_{x}_" in f"_{tag}_" for x in want) or "OPA" in str(opts):
            continue
        keep = all(f"_{x}_" in f"_{tag}_" for x in ("MULTI=0", "LOCAL_MODE=1"))
        summary_[tag] = sass_ops(prg.binaries[0], folder / tag, keep=keep)
        if keep and (folder / tag).with_suffix(".sass").exists():
            texts.append(f"===== {tag}\n" + (folder / tag).with_suffix(".sass").read_text())
    if texts:
        (out / "sass.txt").write_text("\n".join(texts))
    return summary_


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--out", default=os.environ.get("OUT"))
    r.add_argument("--device", default="auto", choices=["auto", "gpu", "cpu"])
    r.add_argument("--targets", type=int, default=200_000)
    r.add_argument("--modes", default="local")
    r.add_argument("--variants", default="s16-cell3-wg128-q8")
    r.add_argument("--configs", default="")
    r.add_argument("--schemes", default="mid")
    r.add_argument("--small-scheme", default="4x8,8x8,8x16/8x16")
    r.add_argument("--overhead", type=float, default=3.0)
    r.add_argument("--min-targets", type=int, default=0)
    r.add_argument("--repeats", type=int, default=3)
    r.add_argument("--verify", action="store_true", help="check against the oracle inline")
    r.add_argument("--skip-small", action="store_true")
    r.add_argument("--small-variants", default="", help="run the small cases for these only")
    r.add_argument(
        "--sass",
        nargs="?",
        const="G=16,R=16",
        default="",
        help="SASS opcode counts of the programs with these -D items (NVIDIA)",
    )
    v = sub.add_parser("verify")
    v.add_argument("--results", required=True)
    v.add_argument("--cache", default="/tmp/search_group_oracle")
    mi = sub.add_parser("micro")
    mi.add_argument("--out", default=os.environ.get("OUT"))
    mi.add_argument("--iters", type=int, default=4096)
    args = ap.parse_args(argv)
    if args.command == "run":
        return run(args)
    if args.command == "verify":
        return verify(args)
    return micro(args)


if __name__ == "__main__":
    sys.exit(main())
