"""Where a compiled model's time goes: every call the VM makes, timed, against its floor.

TVM 0.27's Relax VM has no profiler (``profile=True`` is gone); it calls an instrument before
and after each call instruction (``set_instrument``). :func:`profile` times each call that way
on a VM of its own (the model's own VM is left uninstrumented), over many runs, and takes per
call site the median over runs; the model's end-to-end latency is the median of plain calls
(no instrument), each run just before an instrumented one, so both see the machine alike (on
a shared machine the same model's latency moves by tens of percent within seconds).

Per function called: the calls per run, time per call and per run, share of the latency,
GFLOP/s (:func:`~tvm_ext.base.op_count.algorithm_flops`: TVM's estimate, or fewer where it
counts a repeated subexpression at every copy), its proven floor (:func:`tvm_ext.cost.floor_s`:
no schedule of it runs faster on this machine) and the time over that floor; the rule that
scheduled it (a function the rules repacked runs as ``<name>_prepacked``, a length range's
variant of a symbolic model as ``<name>__le64``, each under its function's rule). A function of
symbolic shape is counted at the shapes its calls received (the first, untimed run records
them; ``length_buckets.bound_at`` binds them): its FLOPs and floor are those of that length. The
VM's own calls (``vm.builtin.*``: allocations, reshapes, tuple work) are rows of kind ``vm``;
what no call accounts for (the VM's dispatch between calls, less the instrument's own cost,
which inflates the timed calls) is the ``unattributed`` row, latency minus the timed calls:
negative when the instrument's cost exceeds the dispatch it hides.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Sequence

import numpy as np

from tvm_ext.base import op_count, tvm_api
from tvm_ext.base.host_threads import settle
from tvm_ext.cost import floor_s
from tvm_ext.hardware.machine import host_machine
from tvm_ext.hardware.target import host_target
from tvm_ext.model_pipeline.compiled import Compiled, Timing
from tvm_ext.model_pipeline.length_buckets import bound_at, symbolic
from tvm_ext.model_pipeline.length_dispatch import variant_base

PREPACKED = "_prepacked"  # the suffix SplitLayoutRewritePreproc gives a repacked function
COLUMNS = ["name", "kind", "rule", "calls", "per_call_us", "per_run_us", "share", "gflops",
           "floor_us", "x_floor"]  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Row:
    """One function the VM calls: a kernel (a PrimFunc), a VM builtin, or the remainder."""

    name: str
    kind: str  # "kernel", "vm" or "unattributed"
    rule: str | None
    calls: int  # per run
    per_call_s: float | None
    per_run_s: float
    share: float  # of the end-to-end latency
    flops: int | None  # per call
    floor_s: float | None  # per call

    @property
    def gflops(self) -> float | None:
        return self.flops / self.per_call_s / 1e9 if self.flops and self.per_call_s else None

    @property
    def x_floor(self) -> float | None:
        return self.per_call_s / self.floor_s if self.floor_s and self.per_call_s else None


@dataclasses.dataclass(frozen=True)
class Profile:
    """A compiled model's calls, timed: ``rows`` (slowest first), the latency they share."""

    model: str
    latency: Timing
    runs: int
    rows: tuple[Row, ...]

    @property
    def timed_s(self) -> float:
        """The timed calls' total per run (kernels and VM builtins)."""
        return sum(r.per_run_s for r in self.rows if r.kind != "unattributed")

    @property
    def kernels_s(self) -> float:
        return sum(r.per_run_s for r in self.rows if r.kind == "kernel")

    def per_call(self) -> dict[str, float]:
        """{function name as the model's lowering named it: seconds one call takes in the
        model} for every kernel (a prepacked kernel under its own function's name)."""
        return {
            r.name.removesuffix("_prepacked"): r.per_call_s
            for r in self.rows
            if r.kind == "kernel" and r.per_call_s
        }

    def slowest(self, n: int = 5) -> list[Row]:
        return [r for r in self.rows if r.kind == "kernel"][:n]

    def table(self):
        """The rows as a pandas DataFrame, times in microseconds."""
        import pandas as pd  # lazy: pandas adds ~0.3 s to `import tvm_ext`

        def us(s):
            return None if s is None else s * 1e6

        return pd.DataFrame(
            [
                [
                    r.name,
                    r.kind,
                    r.rule,
                    r.calls,
                    us(r.per_call_s),
                    us(r.per_run_s),
                    r.share,
                    r.gflops,
                    us(r.floor_s),
                    r.x_floor,
                ]  # fmt: skip
                for r in self.rows
            ],
            columns=COLUMNS,
        )


def profile(
    compiled: Compiled,
    inputs: Sequence[np.ndarray] | None = None,
    *,
    min_seconds: float = 1.0,
    min_runs: int = 5,
    machine=None,
) -> Profile:
    """Profile ``compiled`` on ``inputs`` (default its own; parity is checked first, as for
    :meth:`Compiled.time`): the model runs, alternately plain and instrumented, at least
    ``min_runs`` times each and ``min_seconds``; ``machine`` is the model the floors use
    (default the host's)."""
    if inputs is not None or not compiled.checked:
        compiled.check(inputs)  # parity first, as Compiled.time does
    arguments = compiled.arguments(inputs)
    vm = tvm_api.relax.VirtualMachine(compiled.executable, tvm_api.cpu(0))
    runs: list[list[tuple[str, float]]] = []
    open_calls: list[float] = []
    shapes: list[tuple[str, list]] = []  # per call site, on the first run: what it received

    def instrument(func, name, before_run, ret_value, *args):
        now = time.perf_counter()
        if before_run:
            open_calls.append(now)
        elif runs:
            runs[-1].append((str(name), now - open_calls.pop()))
        else:  # the first run: what each call site receives, untimed
            open_calls.pop()
            shapes.append((str(name), [_static_value(a) for a in args]))
        return 0

    vm.set_instrument(instrument)
    instrumented, plain = vm[compiled.entry], compiled.vm[compiled.entry]
    plain_s: list[float] = []
    settle()  # the caller's own BLAS/OpenMP workers parked, off the cores we time on
    with tvm_api.threads(compiled.threads):
        instrumented(*arguments)  # the shapes each call site receives (and a warm-up)
        for _ in range(2):  # warm-up: pools, caches, the instrument's own first calls
            runs.append([])
            instrumented(*arguments)
            plain(*arguments)
        runs.clear()
        started = time.perf_counter()
        while len(runs) < min_runs or time.perf_counter() - started < min_seconds:
            begin = time.perf_counter()
            plain(*arguments)  # the latency, run by run beside the instrumented runs
            plain_s.append(time.perf_counter() - begin)
            runs.append([])
            instrumented(*arguments)
    median = statistics.median(plain_s)
    latency = Timing(median, min(plain_s), (max(plain_s) - min(plain_s)) / median, len(plain_s),
                     compiled.threads, compiled.flops)  # fmt: skip
    rows = _rows(compiled, runs, shapes, latency, machine)
    return Profile(compiled.name, latency, len(runs), rows)


def _rows(compiled: Compiled, runs, shapes, latency: Timing, machine) -> tuple[Row, ...]:
    sites = [name for name, _ in runs[0]]
    if any([name for name, _ in run] != sites for run in runs + [shapes]):
        raise RuntimeError(f"{compiled.name}: the VM's calls differ between runs")
    per_site = [statistics.median(run[i][1] for run in runs) for i in range(len(sites))]
    totals: dict[str, list[tuple[float, list]]] = {}
    for (name, given), seconds in zip(shapes, per_site):
        totals.setdefault(name, []).append((seconds, given))
    functions = _prim_funcs(compiled)
    rules = {s.name: s.rule for s in compiled.applied.functions} if compiled.applied else {}
    if machine is None:
        machine = host_machine(host_target(num_cores=compiled.threads))
    costs: dict = {}  # (name, what a call received): (FLOPs, floor) of one call
    rows = []
    for name, calls in totals.items():
        func = functions.get(name)
        per_run = sum(seconds for seconds, _ in calls)
        flops = floor = None
        if func is not None:
            each = [_call_cost(func, name, given, compiled.target, machine, costs)
                    for _, given in calls]  # fmt: skip
            flops, floor = (_mean([c[i] for c in each]) for i in (0, 1))
        rows.append(
            Row(
                name,
                "kernel" if func is not None else "vm",
                rules.get(_scheduled_name(name)) if func is not None else None,
                len(calls),
                per_run / len(calls),
                per_run,
                per_run / latency.seconds,
                None if flops is None else round(flops),
                floor,
            )
        )
    rows.sort(key=lambda r: -r.per_run_s)
    rest = latency.seconds - sum(r.per_run_s for r in rows)
    rows.append(Row("unattributed", "unattributed", None, 0, None, rest,
                    rest / latency.seconds, None, None))  # fmt: skip
    return tuple(rows)


def _prim_funcs(compiled: Compiled) -> dict:
    if compiled.module is None:
        return {}
    return {
        gv.name_hint: f
        for gv, f in compiled.module.functions.items()
        if isinstance(f, tvm_api.PrimFunc)
    }


def _static_value(arg):
    """What a call received, as :func:`~tvm_ext.model_pipeline.length_buckets.bound_at`
    takes it: a tensor's shape, an int (None for anything else)."""
    shape = getattr(arg, "shape", None)
    if shape is not None:
        return tuple(int(d) for d in shape)
    return arg if isinstance(arg, int) else None


def _call_cost(func, name: str, given: list, target, machine, costs: dict):
    """(FLOPs, floor seconds) of one call of ``func``, which received ``given``: a function
    of symbolic shape counted at the shapes of the call (its FLOPs at a symbolic extent are
    TVM's estimate with the extent taken as 1, and it has no floor)."""
    key = (name, tuple(given))
    if key not in costs:
        if symbolic(func):
            try:
                func = bound_at(func, given)
            except (TypeError, ValueError, RuntimeError):  # a call that binds no shape
                func = None
            if func is not None and symbolic(func):
                func = None
        costs[key] = (
            (None, None)
            if func is None
            else (op_count.algorithm_flops(func), _floor(func, target, machine))
        )
    return costs[key]


def _mean(values: list) -> float | None:
    return None if any(v is None for v in values) else sum(values) / len(values)


def _scheduled_name(name: str) -> str:
    """The name the rules scheduled a called function under: a repacked function's and a
    length range's variant's (``<name>__le64_prepacked``) their own function's."""
    return variant_base(name.removesuffix(PREPACKED))


def _floor(func, target, machine) -> float | None:
    try:
        return floor_s(func, target, machine=machine)
    except (RuntimeError, ValueError):  # TVM errors are RuntimeErrors: no features to read
        return None


__all__ = ["COLUMNS", "PREPACKED", "Profile", "Row", "profile"]
