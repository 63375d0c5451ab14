"""The host's machine model (roofline): compute peaks per dtype, bandwidth per memory level.

Every figure carries its source: ``probed`` (measured by kernels TVM generates,
:mod:`tvm_ext.hardware.machine_probes`), ``table`` (derived from a probed figure and a documented
ISA ratio) or ``user``. Where a model comes from and where it is kept (probed once per CPU
model and core count, cached in the user cache directory; ``tvm-ext info --reprobe`` measures
again) is :mod:`tvm_ext.hardware.machine`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

SCHEMA = 4
LEVELS = ("llc", "dram")


@dataclass(frozen=True)
class Figure:
    """One number of the model, in base units (FLOP/s or byte/s), with where it came from:
    ``source`` ``"probed"``, ``"table"``, ``"user"`` or ``"measured"`` (a tuned kernel ran
    faster than the model allowed, :func:`tvm_ext.hardware.machine.heal`); ``when`` (UTC,
    ISO 8601) it was taken; ``provisional``: it may read low (its probes disagreed, or a
    kernel proved it low), so it is re-probed at the next chance and no memory arm rests on
    it."""

    value: float
    source: str
    note: str = ""
    when: str = ""
    provisional: bool = False


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

    def has_peak(self, dtype: str) -> bool:
        """Whether the model knows a compute peak for ``dtype`` (an int64 index kernel: no)."""
        return _peak_key(dtype) in self.peaks

    def peak(self, dtype: str) -> float:
        """Compute peak (FLOP/s) for kernels whose inputs are ``dtype``."""
        key = _peak_key(dtype)
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
        figures = {}
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
            figures[key] = Figure(float(value), "user")
        return self.with_figures(figures)

    def with_figures(self, figures: dict[str, Figure]) -> "MachineModel":
        """A copy with ``figures`` (named as :meth:`figures` names them) in place."""
        peaks, bw, latency = dict(self.peaks), dict(self.bandwidth), self.fma_latency
        for name, figure in figures.items():
            kind, _, key = name.partition(".")
            if name == "fma_latency":
                latency = figure
            else:
                (peaks if kind == "peak" else bw)[key] = figure
        return dataclasses.replace(self, peaks=peaks, bandwidth=bw, fma_latency=latency)

    def figures(self) -> dict[str, Figure]:
        """Every figure by name: ``peak.<dtype>``, ``bw.<level>``, ``fma_latency``."""
        return ({f"peak.{k}": v for k, v in self.peaks.items()}
                | {f"bw.{k}": v for k, v in self.bandwidth.items()}
                | {"fma_latency": self.fma_latency})  # fmt: skip

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


def _peak_key(dtype: str) -> str:
    return {"float16": "float32", "uint8": "int8"}.get(dtype, dtype)
