"""The result of compiling a model: a VM to run, check and time, with its kernel table.

:class:`Compiled` is what :func:`tvm_ext.model_pipeline.compile.compile` and ``compile_untuned``
return; its parity was checked when it was made (when a reference and inputs were at hand), and
:meth:`Compiled.time` checks any other inputs before it reports a time.
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import Callable, Sequence

import numpy as np

from tvm_ext.base import tvm_api
from tvm_ext.base.checks import Bounds
from tvm_ext.base.host_threads import reference_threads, settle
from tvm_ext.hardware.target import target_cores
from tvm_ext.measurement.measure import check_parity
from tvm_ext.model_pipeline.boundary import IndexCheck, InputSpec, check_inputs
from tvm_ext.schedules import Applied

Reference = Callable[[Sequence[np.ndarray]], "np.ndarray | Sequence[np.ndarray]"]


@dataclasses.dataclass(frozen=True)
class Timing:
    """End-to-end latency of one compiled model: ``repeats`` timed repeats, each the mean of as
    many calls as last ``min_repeat_ms`` (TVM's time evaluator, after a discarded warm-up)."""

    seconds: float  # median over repeats
    min_seconds: float
    spread: float  # (max - min) / median
    repeats: int
    threads: int
    flops: int | None

    @property
    def gflops(self) -> float | None:
        return self.flops / self.seconds / 1e9 if self.flops else None


@dataclasses.dataclass(frozen=True, eq=False)  # eq=False: holds a VM and TVM tensors
class Compiled:
    """A model built for a target, its parity checked: run it, time it, read its table.

    ``weights`` are passed after the inputs at each call (the untuned path; empty when the
    weights are bound into the executable). ``kernels`` names the PrimFuncs one call runs, in
    order; ``applied`` says which rule scheduled each (None on the untuned path).

    Every call through :meth:`run`, :meth:`check` and :meth:`time` checks its inputs first
    (number, kind, rank, shape, dtype, and each index input against the table it indexes:
    ``index_checks``) and raises :class:`~tvm_ext.base.errors.InputError`; ``vm`` called
    directly skips those checks, but its index kernels still clamp into their tables.
    """

    name: str
    path: str  # "ours" or "untuned"
    target: "tvm_api.Target"
    executable: object
    vm: object
    entry: str
    input_specs: tuple[InputSpec, ...]
    weights: tuple
    kernels: tuple[str, ...]
    applied: Applied | None
    reference: Reference | None
    inputs: tuple[np.ndarray, ...] | None  # default inputs (the model's)
    checked: bool  # parity was checked on ``inputs`` at compile time
    flops: int | None
    compile_seconds: float
    input_names: tuple[str, ...] = ()
    index_checks: tuple[IndexCheck, ...] = ()
    module: object = None  # the IRModule built (its PrimFuncs are what the VM calls)
    # {symbolic dimension: (lowest, highest)} the model declares (None where it does not)
    bounds: Bounds = dataclasses.field(default_factory=dict)

    @property
    def threads(self) -> int:
        return target_cores(self.target)

    def run(self, *inputs: np.ndarray) -> "np.ndarray | list[np.ndarray]":
        """The output of one call on ``inputs`` (numpy arrays; InputError, a ValueError, on
        inputs the model cannot take)."""
        with tvm_api.threads(self.threads):
            out = self.vm[self.entry](*self.arguments(inputs))
        return _to_numpy(out)

    def check(self, inputs: Sequence[np.ndarray] | None = None) -> tuple[float, float]:
        """Max absolute and relative error against the reference on ``inputs`` (default the
        model's); raises ParityError past the dtype's tolerance."""
        inputs = self._inputs_or_default(inputs)
        if self.reference is None:
            raise ValueError(
                f"{self.name}: no reference to check parity against; pass reference= to compile"
            )
        inputs = check_inputs(  # before the reference sees them
            self.name, self.input_names, self.input_specs, self.index_checks, inputs, self.bounds
        )
        with reference_threads():  # no BLAS worker left spinning beside a timing
            expected = self.reference(inputs)
        outs = _as_list(self.run(*inputs))
        return check_parity(outs, _as_list(expected), f"{self.name} ({self.path})")

    def time(self, inputs=None, repeat: int = 10, min_repeat_ms: int = 100) -> Timing:
        """Latency on ``inputs`` (default the model's, whose parity compile checked; other
        inputs are checked first), with the target's ``num-cores`` threads."""
        if repeat < 1 or min_repeat_ms < 0:
            raise ValueError(f"{repeat=} must be >= 1 and {min_repeat_ms=} >= 0")
        if inputs is not None or not self.checked:
            self.check(inputs)
        arguments = self.arguments(inputs)
        evaluator = self.vm.time_evaluator(
            self.entry, tvm_api.cpu(0), number=1, repeat=repeat, min_repeat_ms=min_repeat_ms
        )
        settle()  # the caller's own BLAS/OpenMP workers parked, off the cores we time on
        with tvm_api.threads(self.threads):
            result = evaluator(*arguments)
        times = [float(t) for t in result.results]
        median = statistics.median(times)
        spread = (max(times) - min(times)) / median
        return Timing(median, min(times), spread, len(times), self.threads, self.flops)

    def ready_call(self, inputs=None):
        """A no-argument call of the VM entry with ``inputs`` (default the model's) checked
        and placed and the weights ready: what a side-by-side benchmark times for this
        model, as it times a peer's ready call (the caller sets the threads:
        ``tvm_api.threads``)."""
        entry, arguments = self.vm[self.entry], self.arguments(inputs)
        return lambda: entry(*arguments)

    def _inputs_or_default(self, inputs) -> tuple[np.ndarray, ...]:
        if inputs is not None:
            return tuple(inputs)
        if self.inputs is None:
            raise ValueError(f"{self.name}: no default inputs; pass inputs")
        return self.inputs

    def arguments(self, inputs: Sequence[np.ndarray] | None = None) -> list:
        """What the VM entry is called with: ``inputs`` (default the model's) checked at the
        boundary and placed on the device, then the weights passed at each call (if any)."""
        inputs = self._inputs_or_default(inputs)
        arrays = check_inputs(
            self.name, self.input_names, self.input_specs, self.index_checks, inputs, self.bounds
        )
        dev = tvm_api.cpu(0)
        return [tvm_api.tensor(a, dev) for a in arrays] + list(self.weights)


def _to_numpy(out):
    if hasattr(out, "numpy"):
        return out.numpy()
    return [_to_numpy(o) for o in out]


def _as_list(out) -> list[np.ndarray]:
    return [np.asarray(out)] if isinstance(out, np.ndarray) or np.isscalar(out) else list(out)
