"""Probes of a machine model: kernels TVM generates, timed on this host or on a device.

:func:`probe` measures the host's fp32 peak, FMA latency and LLC/DRAM bandwidths;
:func:`probe_device` a device's peak and latency through an RPC session. The model and its
cache are :mod:`tvm_ext.hardware.machine` (which calls these on a cache miss).
"""

from __future__ import annotations

import datetime
import logging
import pathlib
import re

import numpy as np

from tvm_ext.base import tvm_api
from tvm_ext.base.errors import ProbeError
from tvm_ext.base.host_threads import settle
from tvm_ext.hardware.device import Runtime, Tracker
from tvm_ext.hardware.isa import MIN_FMA_LATENCY_CYCLES, max_boost_hz, microarchitecture
from tvm_ext.hardware.machine_model import Figure, MachineModel
from tvm_ext.hardware.probe_kernels import fma_chains, stream_copy, stream_read
from tvm_ext.hardware.target import (
    as_target,
    has_feature,
    host_table_cpu,
    lanes_for,
    missing_features,
    target_cores,
    target_cpu,
)

log = logging.getLogger(__name__)

# Peak of a compute path relative to the fp32 FMA peak, per core and cycle, from the vendors'
# instruction tables: AVX512-BF16 vdpbf16ps does 2 MACs per fp32 lane; AVX512-VNNI vpdpbusd 4
# int8 MACs per lane; AMX tdpbf16ps/tdpbusd 1024/2048 ops per cycle against 64 fp32 (16x/32x).
_ISA_RATIOS = {
    "bfloat16": (("amx-bf16", 16.0), ("avx512bf16", 2.0)),
    "int8": (("amx-int8", 32.0), ("avx512vnni", 4.0), ("avxvnni", 4.0)),
}


def cache_sizes() -> dict[int, int]:
    """Bytes of data/unified cache per level (one instance), from Linux sysfs."""
    sizes = {}
    for index in pathlib.Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            kind = (index / "type").read_text().strip()
            level = int((index / "level").read_text())
            text = (index / "size").read_text().strip()
        except (OSError, ValueError):
            continue
        match = re.fullmatch(r"(\d+)([KMG]?)", text)
        if kind in ("Data", "Unified") and match:
            sizes[level] = (
                int(match[1]) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[match[2]]
            )
    return sizes


def _best_seconds(func, arrays, min_seconds: float, runtime: Runtime | None = None) -> float:
    dev = tvm_api.cpu(0) if runtime is None else runtime.dev
    func = func if runtime is None else runtime.load(func)
    tensors = [tvm_api.tensor(a, dev) for a in arrays]
    ev = func.time_evaluator(
        func.entry_name, dev, number=1, repeat=7, min_repeat_ms=int(min_seconds * 1000)
    )
    if runtime is None or runtime.session is None:
        settle()  # a probe beside a spinning BLAS worker reads low (host_threads)
    # The first timed runs of a fresh thread pool come out up to 1.5x slow (thread start-up,
    # clock ramp): one discarded evaluation warms both.
    ev(*tensors)
    return float(min(ev(*tensors).results))


def probe_fp32_peak(
    target,
    cores: int,
    lanes: int | None = None,
    chains: int | None = None,
    steps: int = 200_000,
    runtime: Runtime | None = None,
) -> float:
    """FLOP/s of ``chains`` independent ``lanes``-wide FMA recurrences on every core.

    Defaults: the target's vector width, and as many chains as keep every accumulator in a
    register with room to spare (16 of AVX-512's 32, 12 of AVX2's 16: 16 chains of 16 lanes
    on AVX2 spill and measured 42 instead of 100 GFLOP/s on a 2-core Zen 3).
    """
    lanes = lanes_for(target, 32) if lanes is None else lanes
    chains = (16 if lanes >= 16 else 12) if chains is None else chains
    mod = tvm_api.IRModule({"main": fma_chains(cores, chains, lanes, steps)})
    func = tvm_api.build(mod, target)
    size = cores * chains * lanes
    arrays = [np.ones(size, "float32"), np.zeros(size, "float32")]
    seconds = _best_seconds(func, arrays, 0.02, runtime)  # on a device when runtime is one
    return 2.0 * size * steps / seconds


def probe_fma_latency(target, steps: int = 2_000_000, runtime: Runtime | None = None) -> float:
    """Seconds per step of one scalar FMA recurrence (each step waits for the previous)."""
    func = tvm_api.build(tvm_api.IRModule({"main": fma_chains(1, 1, 1, steps)}), target)
    arrays = [np.ones(1, "float32"), np.zeros(1, "float32")]
    seconds = _best_seconds(func, arrays, 0.02, runtime)
    return seconds / steps


def compute_samples(target, cores: int, probes: int = 3, latency_probes: int | None = None,
                    runtime: Runtime | None = None) -> tuple[list[float], list[float]]:  # fmt: skip
    """``probes`` fp32 peak probes (FLOP/s) and ``latency_probes`` (default ``probes``) FMA
    latency probes (s), in the order taken."""
    fp32 = [probe_fp32_peak(target, cores, runtime=runtime) for _ in range(probes)]
    latency = [probe_fma_latency(target, runtime=runtime) for _ in range(latency_probes or probes)]
    return fp32, latency


def best_compute(target, cores: int, probes: int = 3, latency_probes: int | None = None,
                 runtime: Runtime | None = None) -> tuple[float, float]:  # fmt: skip
    """(fp32 FLOP/s, FMA latency s): the best of ``probes`` peak probes and of
    ``latency_probes`` (default ``probes``) latency probes. A peak is the best the machine
    sustains: on a shared host a neighbour can hold a core for a whole probe."""
    fp32, latency = compute_samples(target, cores, probes, latency_probes, runtime)
    return max(fp32), min(latency)


# Probes of one figure that disagree by more than this were disturbed (a neighbour held a core
# for one of them): the best of them may be low too.
AGREEMENT = 1.15


def agree(samples: list[float]) -> bool:
    """Whether repeated probes of one figure agree within :data:`AGREEMENT`."""
    return max(samples) <= AGREEMENT * min(samples)


def probe_copy_bandwidth(target, cores: int, nbytes: int, lanes: int = 16) -> float:
    """byte/s of a streaming copy whose two arrays together hold about ``nbytes`` (counting
    8 bytes per element, as STREAM does: the write-allocate read is not counted)."""
    n = max(nbytes // 8 // (cores * lanes), 1) * cores * lanes
    func = tvm_api.build(tvm_api.IRModule({"main": stream_copy(cores, n, lanes)}), target)
    seconds = _best_seconds(func, [np.ones(n, "float32"), np.zeros(n, "float32")], 0.05)
    return 8.0 * n / seconds


def probe_read_bandwidth(
    target, cores: int, nbytes: int, lanes: int = 16, chains: int = 4
) -> float:
    """byte/s of a streaming read (a vector sum) over about ``nbytes``."""
    unit = cores * lanes * chains
    n = max(nbytes // 4 // unit, 1) * unit
    func = tvm_api.build(tvm_api.IRModule({"main": stream_read(cores, n, lanes, chains)}), target)
    seconds = _best_seconds(func, [np.ones(n, "float32"), np.zeros(unit, "float32")], 0.05)
    return 4.0 * n / seconds


def probe(target=None) -> MachineModel:
    """Measure the host's peaks and bandwidths with kernels TVM generates (a few seconds).

    The probes are built for ``target``, so its CPU must be one this host can run: a model of
    another CPU is probed there (or given with ``overrides``), never guessed here.
    """
    target = as_target(target)
    missing = missing_features(target)
    if missing:
        raise ProbeError(
            f"cannot probe a {target_cpu(target)} machine model on this host: its CPU lacks "
            f"{', '.join(missing)}. Probe on a {target_cpu(target)} machine and pass the model, "
            "or use this host's target."
        )
    cores = target_cores(target)
    caches = cache_sizes()
    if caches:
        llc = caches[max(caches)]
        l2_total = caches.get(2, 1 << 20) * cores
    else:  # sizes unknown: a guess too small would charge cached bytes to memory (a high bound)
        log.warning("cache sizes unreadable from sysfs: the machine model gets no memory arms")
        llc, l2_total = 32 << 20, 1 << 20
    llc_set = max(min(llc // 2, 4 * l2_total), l2_total)  # above every L2, within half the LLC
    dram_set = max(8 * llc, 256 << 20)
    rounds = []
    with tvm_api.threads(cores):
        # A peak is the best the machine sustains: on a shared host a neighbour can hold a
        # core for a whole probe, so each figure is the best of a few independent probes; when
        # they disagree the probe is retaken once, and what still disagrees is provisional.
        for _ in range(2):
            rounds.append(_probe_round(target, cores, llc_set, dram_set))
            if all(agree(samples) for samples in rounds[-1].values()):
                break
    best = {name: (min if name == "latency" else max)(v for r in rounds for v in r[name])
            for name in rounds[0]}  # fmt: skip
    shaky = {name for name, samples in rounds[-1].items() if not agree(samples)}
    for name, value in best.items():
        if not np.isfinite(value) or value <= 0:
            raise ProbeError(f"{name} probe returned {value!r}")
    when = _now()
    peaks = _peaks(target, best["fp32 peak"], f"{cores} cores x FMA chains at the vector width",
                   when, "fp32 peak" in shaky)  # fmt: skip
    bandwidth = {
        "llc": Figure(best["LLC bandwidth"], "probed", "best of streaming read/copy in the LLC",
                      when, "LLC bandwidth" in shaky),
        "dram": Figure(best["DRAM bandwidth"], "probed",
                       "best of streaming read/copy over 8x LLC", when, "DRAM bandwidth" in shaky),
    }  # fmt: skip
    if shaky:
        log.warning("machine probe: %s disagreed across probes beyond %.0f%% (a busy host?): "
                    "kept as provisional, re-probed at the next tune",
                    ", ".join(sorted(shaky)), 100 * (AGREEMENT - 1))  # fmt: skip
    unknown_sizes = UNKNOWN_BYTES if not caches else None
    # Data stays on chip up to the LLC plus every core's L2 (AMD's L3 is a victim cache of L2).
    # The hardware tables are read with the host's own CPU, not the target's mcpu: the code
    # runs here, whatever CPU it was built for.
    return MachineModel(
        _checked_die(host_table_cpu(str(target.attrs.get("mtriple", "")) or None),
                     best["latency"]),
        cores,
        peaks,
        bandwidth,
        unknown_sizes or llc + l2_total,
        unknown_sizes or l2_total,
        lanes_for(target, 32),
        Figure(best["latency"], "probed", "one dependent scalar FMA chain", when,
               "latency" in shaky),
    )  # fmt: skip


def _checked_die(cpu: str, fma_latency: float) -> str:
    """``cpu``, or its microarchitecture when the clock the FMA chain ran at is faster than
    ``cpu``'s server die allows: CPUID read in a VM may name a die the host is not, and no
    step of the chain takes under :data:`~tvm_ext.hardware.isa.MIN_FMA_LATENCY_CYCLES`, so it
    ran at ``MIN_FMA_LATENCY_CYCLES / fma_latency`` Hz or faster."""
    clock = MIN_FMA_LATENCY_CYCLES / fma_latency
    if microarchitecture(cpu) == cpu or clock <= max_boost_hz(cpu):
        return cpu
    log.warning("machine probe: an FMA chain ran at %.2f GHz or faster, past the %.2f GHz of "
                "the server die CPUID names (%s): priced as any %s", clock / 1e9,
                max_boost_hz(cpu) / 1e9, cpu, microarchitecture(cpu))  # fmt: skip
    return microarchitecture(cpu)


def _probe_round(target, cores: int, llc_set: int, dram_set: int) -> dict[str, list[float]]:
    """One round of every host probe: each figure's samples."""
    fp32, latency = compute_samples(target, cores)
    # Bandwidth is the faster of a streaming read and a STREAM copy: a copy's uncounted
    # write-allocate traffic lets read-heavy kernels beat it, and a roof must not be beaten.
    llc, dram = ([max(probe_read_bandwidth(target, cores, size),
                      probe_copy_bandwidth(target, cores, size)) for _ in range(2)]
                 for size in (llc_set, dram_set))  # fmt: skip
    return {"fp32 peak": fp32, "latency": latency, "LLC bandwidth": llc, "DRAM bandwidth": dram}


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _peaks(target, fp32: float, note: str, when: str = "",
           provisional: bool = False) -> dict[str, Figure]:  # fmt: skip
    """The probed fp32 peak and the dot-product peaks derived from it by ISA tables."""
    peaks = {"float32": Figure(fp32, "probed", note, when, provisional)}
    for dtype, ratios in _ISA_RATIOS.items():
        feature, ratio = next(((f, r) for f, r in ratios if has_feature(target, f)), (None, 1.0))
        note = f"fp32 probe x {ratio:g} ({feature})" if feature else "no dot instruction: fp32 rate"
        peaks[dtype] = Figure(fp32 * ratio, "table", note, when, provisional)
    return peaks


# Cache sizes of a device are not visible through TVM's stock RPC server: a device model says
# every size fits "L2", so that no memory level bounds a candidate (a bound must never be
# above a true time) until the user gives the figures.
UNKNOWN_BYTES = 1 << 62


def probe_device(target, tracker: Tracker) -> MachineModel:
    """The machine model of the devices behind ``tracker``, probed on one of them: its fp32
    peak and FMA latency measured there (with the threads its server runs); cache sizes and
    bandwidths are unknown (infinite), so only compute and dependency arms bound."""
    target = as_target(target)
    runtime = Runtime(target, tracker)
    cores = target_cores(target)
    fp32, latency = best_compute(target, cores, runtime=runtime)
    for name, value in (("fp32 peak", fp32), ("FMA latency", latency)):
        if not np.isfinite(value) or value <= 0:
            raise ProbeError(f"{name} probe on {tracker.where} returned {value!r}")
    where = f"on {tracker.where}, {runtime.threads} server threads"
    unknown = Figure(
        float("inf"), "unknown", "not visible through an RPC server; pass machine= to bound"
    )
    return MachineModel(
        target_cpu(target),
        cores,
        _peaks(target, fp32, f"{cores} cores x FMA chains of the widest vectors, {where}"),
        {"llc": unknown, "dram": unknown},
        UNKNOWN_BYTES,
        UNKNOWN_BYTES,
        lanes_for(target, 32),
        Figure(latency, "probed", f"one dependent scalar FMA chain, {where}"),
    )
