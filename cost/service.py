"""The service policy: an additive model of where a candidate's time goes, with a typed,
calibrated profile.

A candidate is described by its *service terms* (:func:`service_terms`), each in one unit:
FLOPs per compute path on the workers that can serve them, bytes per memory level, dependent
FMA steps, parallel-region launches. A :class:`ServiceProfile` prices each unit in seconds;
the predicted time is the sum. The saturation ``capacity`` is the number of workers that add
speed: a block on ``n`` cores is served by ``min(n, capacity)`` of them.

:func:`calibrate` fits a profile to measured candidates by non-negative least squares on
relative error (each row divided by its measured time) for each capacity of a grid, keeping
the best; the profile records its provenance and is saved as JSON. An explicit profile never
falls back: a candidate whose facts a term needs are unavailable raises
:class:`~tvm_ext.base.errors.PolicyError` instead of mixing units. The policy ranks; it never
proves a bound, so it never prunes.
"""

from __future__ import annotations

import datetime
import json
import math
import pathlib
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Mapping, Sequence

import numpy as np
from tvm_ext.cost.training_data import MIN_CALIBRATION_ROWS, check_training_data

from tvm_ext.base.errors import DatasetError, ModelFileError, PolicyError
from tvm_ext.hardware.machine import host_machine

from .features import CandidateFeatures
from .policy import Cost, ExecutionCostPolicy, read_policy_file
from .roofline import AUTO_VECTOR_LANES, RooflinePolicy

PROFILE_SCHEMA = 1
# The units a profile prices, in order; each ``<unit>_s`` field is seconds per unit.
UNITS = ("scalar_flop", "vector_lane_flop", "dot_flop", "access_byte", "llc_byte",
         "dram_byte", "chain_step", "launch")  # fmt: skip


@dataclass(frozen=True)
class ServiceProfile:
    """Seconds per unit of each service term, the saturation capacity, and provenance."""

    scalar_flop_s: float  # a FLOP of a block LLVM cannot vectorize, on one worker
    vector_lane_flop_s: float  # a FLOP of a vectorized block, per lane, on one worker
    dot_flop_s: float  # a FLOP of a tensorized (dot-product instruction) block, on one worker
    access_byte_s: float  # a byte of every block access (the upper traffic), on one worker
    llc_byte_s: float  # a compulsory byte served by the last-level cache
    dram_byte_s: float  # a compulsory byte served by DRAM
    chain_step_s: float  # a dependent multiply-add step not hidden by independent work
    launch_s: float  # one call plus each parallel region's fork/join
    capacity: float  # workers that add speed (a block on n cores gets min(n, capacity))
    provenance: Mapping = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self):
        for unit in UNITS:
            value = getattr(self, f"{unit}_s")
            if not _finite_nonneg(value):
                raise ValueError(f"ServiceProfile.{unit}_s={value!r}: must be a finite number >= 0")
        if not _finite_nonneg(self.capacity) or self.capacity < 1:
            raise ValueError(f"ServiceProfile.capacity={self.capacity!r}: must be >= 1")

    def coefficients(self) -> dict[str, float]:
        return {unit: float(getattr(self, f"{unit}_s")) for unit in UNITS}

    def to_json(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["provenance"] = dict(self.provenance)
        return {"schema": PROFILE_SCHEMA, "kind": "tvm_ext.ServiceProfile", **out}

    def save(self, path) -> None:
        pathlib.Path(path).write_text(json.dumps(self.to_json(), indent=2, sort_keys=True))

    @classmethod
    def load(cls, path) -> "ServiceProfile":
        names = {f.name for f in fields(cls)}
        data = read_policy_file(path, "ServiceProfile", PROFILE_SCHEMA, names - {"provenance"})
        try:
            return cls(**{k: data[k] for k in names if k in data})
        except (TypeError, ValueError) as err:
            raise ModelFileError(f"{path}: {err}") from err


def _finite_nonneg(value) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= 0
    )


def _need(candidate: CandidateFeatures, what: str, ok: bool) -> None:
    if not ok:
        reason = "; ".join(f"{k}: {v}" for k, v in candidate.missing.items()) or "not derived"
        raise PolicyError(
            f"ServicePolicy: the profile prices {what}, which is unavailable for this "
            f"candidate ({reason}); an explicit profile does not fall back to other units",
            policy="ServicePolicy(service)",
        )


def service_terms(
    candidate: CandidateFeatures, capacity: float, on_chip_bytes: float, l2_bytes: float
) -> dict[str, float]:
    """The candidate's amount of each unit (see :data:`UNITS`), served by ``capacity``."""
    if candidate.target_kind != "llvm":
        raise PolicyError(
            f"ServicePolicy: no service model for {candidate.target_kind} candidates "
            "(calibrated on CPU records only)",
            policy="ServicePolicy(service)",
        )
    blocks = candidate.blocks
    _need(candidate, "per-block FLOPs", bool(blocks) and all(
        b.unique_flops is not None for b in blocks))  # fmt: skip
    bytes_ = candidate.bytes.get("dram")
    _need(candidate, "memory traffic", bytes_ is not None and None not in bytes_)
    terms = dict.fromkeys(UNITS, 0.0)
    for b in blocks:
        workers = min(b.cores_used, capacity)
        if b.tensorized:
            terms["dot_flop"] += b.unique_flops / workers
            continue
        lanes = b.explicit_lanes if b.explicit_lanes > 1 else (
            AUTO_VECTOR_LANES if b.possible_lanes > 1 else 1)  # fmt: skip
        if lanes > 1:
            terms["vector_lane_flop"] += b.unique_flops / (workers * lanes)
        else:
            terms["scalar_flop"] += b.unique_flops / workers
    low, high = bytes_
    terms["access_byte"] = high / min(candidate.cores_used or 1.0, capacity)
    if low > on_chip_bytes:
        terms["dram_byte"] = float(low)
    elif low > l2_bytes:
        terms["llc_byte"] = float(low)
    chain = RooflinePolicy()._chain(candidate, {"chain_step": 1.0})
    terms["chain_step"] = float(chain or 0.0)
    terms["launch"] = 1.0 + sum(1 for b in blocks if b.parallel_extent > 1)
    return terms


class ServicePolicy(ExecutionCostPolicy):
    """Predicted time = sum of the profile's prices times the candidate's service terms."""

    name = "service"
    proves_bounds = False
    basis = UNITS

    def __init__(self, profile: ServiceProfile, *, on_chip_bytes=None, l2_bytes=None):
        if not isinstance(profile, ServiceProfile):
            raise TypeError(f"profile must be a ServiceProfile, not {type(profile).__name__}")
        self.profile = profile
        self._sizes = (on_chip_bytes, l2_bytes)

    def __repr__(self) -> str:
        return f"ServicePolicy(capacity={self.profile.capacity:g})"

    def coefficients(self, limits, basis: Sequence[str], prior) -> Mapping[str, float]:
        coeffs = self.profile.coefficients()
        # Cache sizes decide which level serves the compulsory bytes: the machine's, unless
        # the profile was calibrated with explicit ones.
        on_chip, l2 = self._sizes
        if on_chip is None:
            on_chip = float(limits.llc_bytes) if limits is not None else math.inf
        if l2 is None:
            l2 = float(limits.l2_bytes) if limits is not None else math.inf
        return coeffs | {"on_chip_bytes": on_chip, "l2_bytes": l2}

    def terms(self, candidate: CandidateFeatures, coefficients: Mapping[str, float]) -> dict:
        return service_terms(
            candidate,
            self.profile.capacity,
            coefficients["on_chip_bytes"],
            coefficients["l2_bytes"],
        )

    def cost(self, candidate: CandidateFeatures, coefficients: Mapping[str, float]) -> Cost:
        terms = self.terms(candidate, coefficients)
        arms = {unit: terms[unit] * coefficients[unit] for unit in UNITS}
        binding = max(arms, key=arms.get)
        return Cost(sum(arms.values()), None, binding, MappingProxyType(arms))


CAPACITY_GRID = (1.0, 1.25, 1.5, 1.75, 2.0, 3.0, 4.0, 6.0, 8.0, 16.0, 32.0, 64.0)


def calibrate(data, *, machine=None, capacities: Sequence[float] | None = None) -> ServiceProfile:
    """Fit a :class:`ServiceProfile` to the measured rows of a :func:`dataset` frame."""
    from scipy.optimize import nnls  # lazy: scipy costs ~0.3 s to import; only calibration needs it

    data = check_training_data(data, MIN_CALIBRATION_ROWS, ("features_json",))
    machine = machine if machine is not None else host_machine()
    cands = [CandidateFeatures.from_dict(json.loads(s)) for s in data["features_json"]]
    seconds = data["seconds"].to_numpy(dtype="float64")
    cores = max(c.cores for c in cands)
    grid = [c for c in (capacities or CAPACITY_GRID) if c <= cores] or [1.0]
    best = None
    for capacity in grid:
        rows = []
        for cand in cands:
            try:
                terms = service_terms(cand, capacity, machine.llc_bytes, machine.l2_bytes)
            except PolicyError:
                terms = None
            rows.append(terms)
        keep = np.array([t is not None for t in rows])
        if keep.sum() < MIN_CALIBRATION_ROWS:
            raise DatasetError(
                f"only {int(keep.sum())} rows have every fact the service terms need "
                f"(at least {MIN_CALIBRATION_ROWS} are required)"
            )
        x = np.array([[t[u] for u in UNITS] for t in rows if t is not None], dtype="float64")
        t = seconds[keep]
        # Relative error: each row is divided by its measured time. Columns are scaled to
        # unit norm for conditioning, then the coefficients scaled back.
        a = x / t[:, None]
        norms = np.linalg.norm(a, axis=0)
        norms[norms == 0] = 1.0
        coef, _ = nnls(a / norms, np.ones_like(t), maxiter=50 * len(UNITS))
        coef = coef / norms
        rel = np.abs(x @ coef - t) / t
        score = float(np.median(rel))
        if best is None or score < best[0]:
            best = (score, capacity, coef, int(keep.sum()))
    score, capacity, coef, used = best
    provenance = {
        "calibrated": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "method": "non-negative least squares on relative error, capacity by grid",
        "rows": used,
        "workloads": sorted(set(data["workload"])),
        "cpu_models": sorted({str(m) for m in data.get("cpu_model", [])}),
        "targets": sorted({str(m) for m in data.get("target", [])}),
        "capacity_grid": list(grid),
        "median_relative_error_in_sample": score,
        "llc_bytes": float(machine.llc_bytes),
        "l2_bytes": float(machine.l2_bytes),
    }
    return ServiceProfile(
        **{f"{u}_s": float(v) for u, v in zip(UNITS, coef)},
        capacity=float(capacity),
        provenance=MappingProxyType(provenance),
    )
