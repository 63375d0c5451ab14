"""The host's machine model (roofline): compute peaks per dtype, bandwidth per memory level.

Every figure carries its source: ``probed`` (measured here by kernels TVM generates),
``table`` (derived from a probed figure and a documented ISA ratio) or ``user``. Probes are
cached per CPU model and core count in the user cache directory; ``tvm-ext info --reprobe``
measures again.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import pathlib
import re
from dataclasses import dataclass

import numpy as np
import platformdirs

from tvm_ext.base import tvm_api
from tvm_ext.base.errors import ProbeError
from tvm_ext.base.host_threads import settle
from tvm_ext.facts.device import Runtime, Tracker
from tvm_ext.facts.probe_kernels import fma_chains, stream_copy, stream_read
from tvm_ext.facts.target import (
    as_target,
    has_feature,
    lanes_for,
    missing_features,
    target_cores,
    target_cpu,
)

log = logging.getLogger(__name__)
SCHEMA = 4
LEVELS = ("llc", "dram")

# Peak of a compute path relative to the fp32 FMA peak, per core and cycle, from the vendors'
# instruction tables: AVX512-BF16 vdpbf16ps does 2 MACs per fp32 lane; AVX512-VNNI vpdpbusd 4
# int8 MACs per lane; AMX tdpbf16ps/tdpbusd 1024/2048 ops per cycle against 64 fp32 (16x/32x).
_ISA_RATIOS = {
    "bfloat16": (("amx-bf16", 16.0), ("avx512bf16", 2.0)),
    "int8": (("amx-int8", 32.0), ("avx512vnni", 4.0), ("avxvnni", 4.0)),
}


@dataclass(frozen=True)
class Figure:
    """One number of the model, in base units (FLOP/s or byte/s), with where it came from."""

    value: float
    source: str  # "probed", "table" or "user"
    note: str = ""


@dataclass(frozen=True)
class MachineModel:
    """Peaks (FLOP/s per dtype) and bandwidths (byte/s per level) of a CPU at ``cores`` threads."""

    cpu: str
    cores: int
    peaks: dict[str, Figure]
    bandwidth: dict[str, Figure]
    llc_bytes: int  # bytes that stay on chip: the LLC plus every core's L2
    l2_bytes: int  # bytes of every core's L2 together
    vector_lanes: int  # fp32 lanes of the widest vector register
    fma_latency: Figure  # seconds from one dependent FMA to the next (value in s, not 1/s)

    def peak(self, dtype: str) -> float:
        """Compute peak (FLOP/s) for kernels whose inputs are ``dtype``."""
        key = {"float16": "float32", "uint8": "int8"}.get(dtype, dtype)
        if key not in self.peaks:
            raise ValueError(f"no compute peak for dtype={dtype!r}; known: {sorted(self.peaks)}")
        return self.peaks[key].value

    def memory_level(self, nbytes: float) -> str:
        """The level ``nbytes`` of data fits in: ``"l2"`` (every core's L2 together),
        ``"llc"`` (on chip) or ``"dram"``."""
        if nbytes <= self.l2_bytes:
            return "l2"
        return "llc" if nbytes <= self.llc_bytes else "dram"

    def roofline_seconds(self, flops: float, nbytes: float, dtype: str) -> float:
        """Least time any implementation needs: compute at peak or compulsory traffic at the
        bandwidth of the level the data fits in. Data that fits in L2 has no memory roof here
        (L2 bandwidth is not probed): compute alone bounds it."""
        level = self.memory_level(nbytes)
        compute = flops / self.peak(dtype)
        if level == "l2":
            return compute
        return max(compute, nbytes / self.bandwidth[level].value)

    def with_overrides(self, overrides: dict[str, float]) -> "MachineModel":
        """A copy with figures given by the user: keys ``peak.<dtype>``, ``bw.<level>`` or
        ``fma_latency`` (seconds)."""
        peaks, bw, latency = dict(self.peaks), dict(self.bandwidth), self.fma_latency
        for key, value in overrides.items():
            kind, _, name = key.partition(".")
            valid = (
                (kind == "peak" and name)
                or (kind == "bw" and name in LEVELS)
                or key == "fma_latency"
            )
            if not valid:
                raise ValueError(
                    f"override key {key!r}: use 'peak.<dtype>', "
                    f"'bw.<{'|'.join(LEVELS)}>' or 'fma_latency'"
                )
            if not isinstance(value, (int, float)) or not np.isfinite(value) or value <= 0:
                raise ValueError(f"override {key}={value!r} must be a positive finite number")
            if key == "fma_latency":
                latency = Figure(float(value), "user")
            else:
                (peaks if kind == "peak" else bw)[name] = Figure(float(value), "user")
        return dataclasses.replace(self, peaks=peaks, bandwidth=bw, fma_latency=latency)

    def to_json(self) -> dict:
        return {"schema": SCHEMA, **dataclasses.asdict(self)}

    @classmethod
    def from_json(cls, data: dict) -> "MachineModel":
        if data.get("schema") != SCHEMA:
            raise ValueError(f"machine model schema {data.get('schema')!r}, expected {SCHEMA}")
        return cls(
            data["cpu"],
            int(data["cores"]),
            {k: Figure(**v) for k, v in data["peaks"].items()},
            {k: Figure(**v) for k, v in data["bandwidth"].items()},
            int(data["llc_bytes"]),
            int(data["l2_bytes"]),
            int(data["vector_lanes"]),
            Figure(**data["fma_latency"]),
        )


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
    llc = caches[max(caches)] if caches else 32 << 20
    l2_total = caches.get(2, 1 << 20) * cores
    llc_set = max(min(llc // 2, 4 * l2_total), l2_total)  # above every L2, within half the LLC
    dram_set = max(8 * llc, 256 << 20)
    with tvm_api.threads(cores):
        # A peak is the best the machine sustains: on a shared host a neighbour can hold a
        # core for a whole probe, so each figure is the best of a few independent probes.
        fp32 = max(probe_fp32_peak(target, cores) for _ in range(3))
        latency = min(probe_fma_latency(target) for _ in range(3))
        # Bandwidth is the faster of a streaming read and a STREAM copy: a copy's uncounted
        # write-allocate traffic lets read-heavy kernels beat it, and a roof must not be beaten.
        llc_bw = max(
            max(
                probe_read_bandwidth(target, cores, llc_set),
                probe_copy_bandwidth(target, cores, llc_set),
            )
            for _ in range(2)
        )
        dram_bw = max(
            max(
                probe_read_bandwidth(target, cores, dram_set),
                probe_copy_bandwidth(target, cores, dram_set),
            )
            for _ in range(2)
        )
    for name, value in (
        ("fp32 peak", fp32),
        ("LLC bandwidth", llc_bw),
        ("DRAM bandwidth", dram_bw),
        ("FMA latency", latency),
    ):
        if not np.isfinite(value) or value <= 0:
            raise ProbeError(f"{name} probe returned {value!r}")
    peaks = {"float32": Figure(fp32, "probed", f"{cores} cores x FMA chains at the vector width")}
    for dtype, ratios in _ISA_RATIOS.items():
        feature, ratio = next(((f, r) for f, r in ratios if has_feature(target, f)), (None, 1.0))
        note = f"fp32 probe x {ratio:g} ({feature})" if feature else "no dot instruction: fp32 rate"
        peaks[dtype] = Figure(fp32 * ratio, "table", note)
    bandwidth = {
        "llc": Figure(llc_bw, "probed", "best of streaming read/copy in the LLC"),
        "dram": Figure(dram_bw, "probed", "best of streaming read/copy over 8x LLC"),
    }
    # Data stays on chip up to the LLC plus every core's L2 (AMD's L3 is a victim cache of L2).
    return MachineModel(
        target_cpu(target),
        cores,
        peaks,
        bandwidth,
        llc + l2_total,
        l2_total,
        lanes_for(target, 32),
        Figure(latency, "probed", "one dependent scalar FMA chain"),
    )


def _peaks(target, fp32: float, note: str) -> dict[str, Figure]:
    """The probed fp32 peak and the dot-product peaks derived from it by ISA tables."""
    peaks = {"float32": Figure(fp32, "probed", note)}
    for dtype, ratios in _ISA_RATIOS.items():
        feature, ratio = next(((f, r) for f, r in ratios if has_feature(target, f)), (None, 1.0))
        note = f"fp32 probe x {ratio:g} ({feature})" if feature else "no dot instruction: fp32 rate"
        peaks[dtype] = Figure(fp32 * ratio, "table", note)
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
    fp32 = max(probe_fp32_peak(target, cores, runtime=runtime) for _ in range(3))
    latency = min(probe_fma_latency(target, runtime=runtime) for _ in range(3))
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


def device_machine(target, tracker: Tracker, *, reprobe: bool = False) -> MachineModel:
    """The model of the devices under ``tracker.key`` (one device kind): probed there once,
    then read from the user cache directory."""
    target = as_target(target)
    name = f"machine-{target_cpu(target)}-{target_cores(target)}c-rpc-{tracker.key}.json"
    path = cache_path(target).parent / name  # beside this host's model
    return _cached(path, reprobe, lambda: probe_device(target, tracker))


def _cached(path: pathlib.Path, reprobe: bool, make) -> MachineModel:
    model = None
    if path.exists() and not reprobe:
        try:
            model = MachineModel.from_json(json.loads(path.read_text()))
        except (ValueError, KeyError, TypeError) as err:
            log.warning("ignoring unreadable machine cache %s (%s); probing again", path, err)
    if model is None:
        model = make()
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(model.to_json(), indent=2))
        tmp.replace(path)
    return model


def cache_path(target) -> pathlib.Path:
    """Where the probe of this CPU model and core count is cached: in ``$TVM_EXT_CACHE_DIR``
    when it is set (read at each call; the test suite points it at a temporary folder), else
    in the user cache directory."""
    name = f"machine-{target_cpu(target)}-{target_cores(target)}c.json"
    root = os.environ.get("TVM_EXT_CACHE_DIR") or platformdirs.user_cache_dir("tvm-ext")
    return pathlib.Path(root) / name


def host_machine(
    target=None, *, reprobe: bool = False, overrides: dict | None = None
) -> MachineModel:
    """The machine model of ``target`` (default the host): cached probe, then ``overrides``."""
    target = as_target(target)
    model = _cached(cache_path(target), reprobe, lambda: probe(target))
    return model.with_overrides(overrides) if overrides else model
