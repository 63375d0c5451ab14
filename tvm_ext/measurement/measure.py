"""Build, check parity, time: the three numbers (parity, GFLOP/s, % of roofline peak).

Parity comes first: a module whose output differs from the reference raises
:class:`~tvm_ext.base.errors.ParityError` and is never timed.
"""

from __future__ import annotations

import logging
import statistics
import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from tvm_ext.base import op_count, tvm_api
from tvm_ext.base.errors import ParityError
from tvm_ext.base.host_threads import reference_threads, settle
from tvm_ext.hardware.device import Runtime, Tracker
from tvm_ext.hardware.machine import heal, host_machine
from tvm_ext.hardware.machine_model import MachineModel
from tvm_ext.hardware.target import as_target, host_target
from tvm_ext.workloads.kernels import Workload, from_func, np_dtype

log = logging.getLogger(__name__)

# Relative tolerance per output dtype. An element passes when
# |out - ref| <= rtol * (|ref| + mean|ref|): the mean term keeps near-zero references from
# demanding more than the dtype can hold. fp32: accumulation-order differences over K ~ 4096
# stay near 1e-6; fp16/bf16 outputs carry 11/8 mantissa bits. Integer outputs must be exact.
RTOL = {"float32": 1e-4, "float64": 1e-9, "float16": 2e-3, "bfloat16": 1.6e-2}


@dataclass(frozen=True)
class Measurement:
    """Parity errors and timing of one built module.

    ``seconds`` is the median of ``repeats`` timed repeats (each long enough to time well),
    ``spread`` is ``(max - min) / median`` over them. ``peak_fraction`` is of the machine's
    compute peak for the workload's dtype; ``roofline_fraction`` of the roofline (compute peak
    or compulsory traffic at the bandwidth of the level the data fits in, whichever binds).
    """

    max_abs_error: float
    max_rel_error: float
    seconds: float
    min_seconds: float
    spread: float
    repeats: int
    threads: int
    flops: int | None
    gflops: float | None
    peak_fraction: float | None
    roofline_fraction: float | None
    target: str
    measured_on: str = "this host"  # or "device '<key>' via the RPC tracker at host:port"


def _errors(out: np.ndarray, ref: np.ndarray) -> tuple[float, float]:
    tiny = np.finfo(out.dtype).tiny if np.issubdtype(out.dtype, np.floating) else 0.0
    out = out.astype(np.float64) if out.dtype != np.float64 else out
    ref = np.asarray(ref, dtype=np.float64)
    if tiny:
        # A subnormal of the output's type is a zero a flush-to-zero unit may have made of it
        # (either side): no error. An output all of subnormals (a randomly initialized
        # MobileViT's activations vanish to ~1e-40) would otherwise fail on 5e-41.
        out, ref = (np.where(np.abs(a) < tiny, 0.0, a) for a in (out, ref))
    if out.shape != ref.shape:
        raise ParityError(
            f"output shape {out.shape} differs from the reference's {ref.shape}",
            max_abs_error=float("inf"),
            max_rel_error=float("inf"),
        )
    if out.size == 0:
        return 0.0, 0.0
    # A NaN or an infinity where the reference has the same (a SiLU of -inf, a root of a
    # negative mean) is no error; anywhere else it is an infinite one.
    with np.errstate(invalid="ignore"):
        same = (out == ref) | (np.isnan(out) & np.isnan(ref))
        diff = np.abs(out - ref)
    diff = np.where(same, 0.0, np.where(np.isnan(diff), np.inf, diff))
    finite = np.abs(ref[np.isfinite(ref)])
    scale = float(np.mean(finite)) if finite.size else 0.0
    with np.errstate(invalid="ignore"):
        rel = np.where(same, 0.0, diff / (np.abs(ref) + scale + 1e-300))
    rel = np.where(np.isnan(rel), np.inf, rel)  # an infinite error over an infinite reference
    return float(np.max(diff)), float(np.max(rel))


def check_parity(
    outputs: Sequence[np.ndarray], expected: Sequence[np.ndarray], label: str
) -> tuple[float, float]:
    """Max absolute and relative error of ``outputs``; raises ParityError past tolerance."""
    worst_abs = worst_rel = 0.0
    for i, (out, ref) in enumerate(zip(outputs, expected)):
        abs_err, rel_err = _errors(out, ref)
        dtype = str(out.dtype)
        rtol = RTOL.get(dtype, 0.0)
        ok = (abs_err == 0.0) if rtol == 0.0 else (rel_err <= rtol)
        if not ok:  # also catches NaN
            raise ParityError(
                f"{label}: output {i} ({dtype}) differs from the reference: max abs error "
                f"{abs_err:.3g}, max rel error {rel_err:.3g} > tolerance {rtol:g}",
                max_abs_error=abs_err,
                max_rel_error=rel_err,
            )
        worst_abs, worst_rel = max(worst_abs, abs_err), max(worst_rel, rel_err)
    return worst_abs, worst_rel


def kernel_name(obj) -> str:
    """The name the user gave a kernel: its ``global_symbol`` (a PrimFunc's, or the single
    function's of a module or schedule), else its name in the module."""
    if isinstance(obj, tvm_api.PrimFunc):
        symbol = obj.attrs.get("global_symbol") if obj.attrs is not None else None
        return str(symbol) if symbol else "kernel"
    for gv, func in tvm_api.as_module(obj).functions.items():
        if isinstance(func, tvm_api.PrimFunc):
            symbol = func.attrs.get("global_symbol") if func.attrs is not None else None
            return str(symbol or gv.name_hint)
    return "kernel"


def _check_arrays(arrays: Sequence[np.ndarray], specs, label: str) -> None:
    if len(arrays) != len(specs):
        raise ValueError(f"{label}: {len(arrays)} arrays for {len(specs)} parameters")
    for i, (a, (shape, dtype)) in enumerate(zip(arrays, specs)):
        if tuple(a.shape) != shape or a.dtype != np_dtype(dtype):
            raise ValueError(
                f"{label}: parameter {i} is {shape} {dtype}, the workload gives "
                f"{tuple(a.shape)} {a.dtype}"
            )


def run(lib, arrays: Sequence[np.ndarray], dev) -> list[np.ndarray]:
    """Run a built module once on copies of ``arrays``; returns every parameter afterwards."""
    tensors = [tvm_api.tensor(a, dev) for a in arrays]
    lib[lib.entry_name](*tensors)
    return [t.numpy() for t in tensors]


def _random_inputs(specs, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for shape, dtype in specs:
        if np.issubdtype(np_dtype(dtype), np.integer):
            out.append(rng.integers(-8, 8, size=shape).astype(np_dtype(dtype)))
        else:
            out.append(rng.uniform(-1, 1, size=shape).astype(np_dtype(dtype)))
    return out


@dataclass(frozen=True)
class _Checked:
    """A module built, loaded where it runs and checked for parity: what timing needs."""

    target: object
    label: str
    runtime: Runtime
    lib: object
    arrays: list
    errors: tuple[float, float]
    cost: tuple  # (flops, compulsory bytes, dtype)


def _prepare(obj, workload, target, reference, seed, tracker=None, label=None) -> _Checked:
    """Build ``obj``, load it on this host or the device and check its parity."""
    mod = tvm_api.as_module(obj)
    func = tvm_api.main_func(mod)
    target = as_target(target)
    workload = workload if workload is not None else from_func(func)
    label = label or (workload.key if workload is not None else kernel_name(obj))
    specs = tvm_api.param_specs(func)
    runtime = Runtime(target, tracker)
    lib = runtime.load(tvm_api.build(mod, target))
    if workload is not None:
        arrays = workload.inputs(seed)
        _check_arrays(arrays, specs, label)
        with runtime.threads_context():
            result = run(lib, arrays, runtime.dev)
        outs = [result[i] for i in workload.outputs]
        with reference_threads():  # no BLAS worker left spinning beside the timing
            expected = workload.reference(arrays)
        errors = check_parity(outs, expected, label)
        cost = (workload.flops, workload.min_bytes, workload.dtype)
    elif reference is not None:
        ref_mod = tvm_api.as_module(reference)
        _check_arrays(
            _random_inputs(tvm_api.param_specs(tvm_api.main_func(ref_mod)), seed),
            specs,
            f"{label} vs its reference",
        )
        arrays = _random_inputs(specs, seed)
        ref_lib = runtime.load(tvm_api.build(ref_mod, target))
        with runtime.threads_context():
            result = run(lib, arrays, runtime.dev)
            expected = run(ref_lib, arrays, runtime.dev)
        errors = check_parity(result, expected, label)
        nbytes = sum(int(np.prod(s)) * np_dtype(d).itemsize for s, d in specs)
        # The algorithm's FLOPs, counted on the reference: TVM's estimate of a scheduled
        # function also counts its split predicates and recomputations (up to 500x a layer
        # norm's on MetaSchedule's candidates), which made a kernel "beat" the compute peak;
        # and of any function, every copy of a repeated subexpression (BERT's GELU 78 an
        # element for 30), which would heal the compute roof upward on no evidence.
        flops = op_count.algorithm_flops(tvm_api.main_func(ref_mod)) or 0
        cost = (flops, nbytes, specs[0][1])
    else:
        raise ValueError(
            f"{label}: no reference to check parity against; pass workload= (a tvm_ext.kernels "
            "Workload) or reference= (the unscheduled PrimFunc/IRModule)"
        )
    return _Checked(target, label, runtime, lib, arrays, errors, cost)


def verify(
    obj, workload: Workload | None = None, target=None, *, reference=None, seed: int = 0,
    tracker: Tracker | None = None,
) -> tuple[float, float]:  # fmt: skip
    """Build and run ``obj`` once and check parity, without timing: (max abs, max rel) error.

    Raises ParityError past the dtype's tolerance; the references are those of :func:`measure`.
    """
    return _prepare(obj, workload, target, reference, seed, tracker).errors


def measure(
    obj,
    workload: Workload | None = None,
    target=None,
    *,
    reference=None,
    machine: MachineModel | None = None,
    repeat: int = 10,
    min_repeat_ms: int = 50,
    seed: int = 0,
    tracker: Tracker | None = None,
    label: str | None = None,
    weights_repacked_once: bool = False,
) -> Measurement:
    """Build ``obj`` (Schedule, IRModule or PrimFunc) for ``target``, check parity, time it.

    The reference is ``workload``'s numpy reference; else that of the suite workload the
    function was built from (it carries it as an attribute through scheduling); else
    ``reference``, an unscheduled PrimFunc/IRModule run on the same random inputs. A numpy
    reference runs with BLAS at one thread, and on this host the timing first waits until no
    other thread of the process burns CPU (:mod:`tvm_ext.base.host_threads`: a BLAS worker
    left spinning by a reference took a core from the kernel). Timing runs
    with the target's ``num-cores`` threads. With ``tracker`` the module runs and is timed on
    one of its devices (with the threads its server runs), and the fractions of peak use
    ``machine`` only (the devices' model; none is assumed). ``label`` names the kernel in
    messages (default its workload key or its own name).

    ``weights_repacked_once``: the function is a task of a model, whose weights the compiled
    model repacks once, at compile time (Relax lifts each block marked as a weight repack out
    and folds it into a constant). Parity is checked on the whole function, repack included;
    the time is that of the function without its repacking blocks
    (:func:`~tvm_ext.base.tvm_api.without_weight_repack`, as MetaSchedule's builder times
    its candidates), run on random inputs in the packed layouts: what the model runs per call.
    """
    if not isinstance(repeat, int) or repeat < 1:
        raise ValueError(f"repeat={repeat!r} must be a positive int")
    checked = _prepare(obj, workload, target, reference, seed, tracker, label)
    runtime, lib, arrays = checked.runtime, checked.lib, checked.arrays
    if weights_repacked_once:
        lib, arrays = _without_repack(obj, checked, seed)
    tensors = [tvm_api.tensor(a, runtime.dev) for a in arrays]
    ev = lib.time_evaluator(
        lib.entry_name, runtime.dev, number=1, repeat=repeat, min_repeat_ms=min_repeat_ms
    )
    warm = lib.time_evaluator(
        lib.entry_name, runtime.dev, number=1, repeat=1, min_repeat_ms=min_repeat_ms
    )
    if runtime.session is None:
        settle()  # the caller's own BLAS/OpenMP workers parked, off the cores we time on
    with runtime.threads_context():
        warm(*tensors)  # warm the thread pool, clocks and caches; discarded
        times = np.array(ev(*tensors).results, dtype=np.float64)
    median = float(np.median(times))
    flops = checked.cost[0]
    if machine is None and tracker is None and checked.target.kind.name == "llvm":
        # The peak is the hardware's, whatever CPU the target names (a generic build
        # leaves most of it unused: that is what the fraction should show).
        machine = host_machine(host_target(num_cores=runtime.threads))
    peak, roof = _fractions(checked, machine, median)
    return Measurement(
        *checked.errors,
        median,
        float(times.min()),
        float((times.max() - times.min()) / median),
        repeat,
        runtime.threads,
        flops,
        flops / median / 1e9 if flops else None,
        peak,
        roof,
        str(checked.target),
        runtime.where,
    )


def _without_repack(obj, checked: _Checked, seed: int):
    """The checked module built without its weight-repacking blocks, and inputs for it (the
    checked ones when it has no such block)."""
    mod = tvm_api.as_module(obj)
    stripped = tvm_api.without_weight_repack(mod)
    specs = tvm_api.param_specs(tvm_api.main_func(stripped))
    if specs == tvm_api.param_specs(tvm_api.main_func(mod)):
        return checked.lib, checked.arrays
    lib = checked.runtime.load(tvm_api.build(stripped, checked.target))
    return lib, _random_inputs(specs, seed)


def _fractions(checked: _Checked, machine: MachineModel | None, seconds: float):
    """(fraction of the compute peak, fraction of the roofline), None without a model; warns
    when the roofline was beaten (the model underestimates the machine)."""
    flops, nbytes, dtype = checked.cost
    if machine is None or not flops or checked.target.kind.name != "llvm":
        return None, None
    if not machine.has_peak(dtype):  # an integer index kernel: no peak to compare with
        return None, None
    roof = machine.roofline_seconds(flops, nbytes, dtype) / seconds
    if roof > 1.0 and checked.runtime.session is None:
        # Proof the model reads low on this host: its roof is raised (the cache's, one line).
        heal(machine, checked.target, flops=flops, nbytes=nbytes, dtype=dtype, seconds=seconds,
             label=checked.label)  # fmt: skip
    return flops / seconds / machine.peak(dtype), roof


def time_callable(fn, min_seconds: float = 0.05, repeat: int = 7) -> float:
    """Median seconds per call of ``fn`` over ``repeat`` samples of at least ``min_seconds``."""
    fn()
    start = time.perf_counter()
    fn()
    once = max(time.perf_counter() - start, 1e-7)
    number = max(1, int(min_seconds / once))
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        samples.append((time.perf_counter() - start) / number)
    return statistics.median(samples)
