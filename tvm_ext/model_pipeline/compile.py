"""Compile a Relax model end to end: weights bound and folded, every kernel scheduled by the
IR rules, parity checked, then a VM ready to run and time.

``compile(model)`` is our path: bind the weights as constants, legalize, fold constants (so
weight-only work such as the transposes ``Linear`` puts before each matmul happens once, at
compile time), fuse, drop dead functions, schedule every PrimFunc with
:func:`tvm_ext.schedules.apply`, build. ``compile_untuned(model)`` is TVM's stock path for
comparison: ``relax.get_pipeline("zero")`` and a build, weights passed at every call, no
schedule. Both return a :class:`Compiled` whose parity against the model's numpy reference was
checked before it is returned: a :class:`~tvm_ext.base.errors.ParityError` is raised, never a
time. On both, every index kernel stays inside its table and each call's inputs are checked
(:mod:`tvm_ext.model_pipeline.boundary`).
"""

from __future__ import annotations

import dataclasses
import logging
import time as _clock
from typing import Sequence

import numpy as np

from tvm_ext.base import tvm_api
from tvm_ext.hardware.target import as_target, lanes_for
from tvm_ext.model_pipeline.boundary import InputSpec, index_checks, input_vars
from tvm_ext.model_pipeline.compiled import Compiled, Reference, Timing
from tvm_ext.model_pipeline.conv_taps import outside_taps_dropped
from tvm_ext.model_pipeline.fast_activations import LEGALIZE, activations_as_fast_math
from tvm_ext.model_pipeline.fills import fills_as_scalars
from tvm_ext.model_pipeline.index_guard import safe_indexing
from tvm_ext.model_pipeline.layout import channels_last, folded_batch_norm, whole_vector_weights
from tvm_ext.model_pipeline.length_dispatch import bounded_rules, dispatching
from tvm_ext.model_pipeline.matmul_reshapes import matmuls_before_reshapes, reshapes_merged
from tvm_ext.model_pipeline.relax_fixes import fixed
from tvm_ext.model_pipeline.repacks import fold_prepacks
from tvm_ext.model_pipeline.transposes import transposes_before_reshapes
from tvm_ext.schedules.rules.dispatch import apply
from tvm_ext.workloads.model_base import Model

log = logging.getLogger(__name__)


def compile(
    model,
    target=None,
    params=None,
    *,
    reference: Reference | None = None,
    inputs: Sequence[np.ndarray] | None = None,
    rules=None,
) -> Compiled:
    """Compile ``model`` with the weights bound and folded and every kernel scheduled by the
    IR rules; checks parity before returning.

    Parameters
    ----------
    model
        A zoo :class:`~tvm_ext.workloads.model_base.Model` (its weights, inputs and reference are
        used), or a Relax IRModule as ``relax.frontend.nn``'s ``export_tvm`` or
        ``relax.frontend.torch.from_exported_program`` give it.
    target
        An llvm target (default the host, :func:`~tvm_ext.hardware.target.host_target`).
    params
        For an IRModule: its weights, numpy arrays in parameter order (the last parameters of
        the entry function) or by parameter name; default the ``params`` attribute that
        ``from_exported_program(keep_params_as_input=True)`` leaves.
    reference, inputs
        For an IRModule: ``reference(inputs) -> expected output(s)`` and the inputs to check
        parity on at compile time (without both, parity is checked when it is first timed).
    rules
        The rule list for :func:`tvm_ext.schedules.apply` (default its CPU rules).
    """
    start = _clock.perf_counter()
    target, source = cpu_target(target), ModelSource.of(model, params, reference, inputs)
    lowered = bind_and_lower(source, target)
    applied = apply(lowered, target) if rules is None else apply(lowered, target, rules=rules)
    mod = applied.mod
    if rules is None:
        mod = short_lengths(mod, lowered, source, target)
    return build_compiled(source, "ours", target, fold_prepacks(mod, source.entry), (),
                          applied, start)  # fmt: skip


def short_lengths(mod, lowered, source: "ModelSource", target):
    """A model of one symbolic length: ``mod`` (its rules' schedules) dispatching short
    lengths to the rules' schedules for them (kernels too small for a parallel region at
    those lengths run serially: :func:`~tvm_ext.model_pipeline.length_dispatch.bounded_rules`);
    else ``mod``."""
    bounds = tvm_api.symbolic_bounds(source.mod[source.entry])
    if len(bounds) != 1:
        return mod
    ((var, (low, high)),) = bounds.items()
    uppers, variants = bounded_rules(mod, lowered, target, var, low, high)
    return dispatching(mod, source.entry, var, uppers, variants)


def compile_untuned(
    model,
    target=None,
    params=None,
    *,
    reference: Reference | None = None,
    inputs: Sequence[np.ndarray] | None = None,
) -> Compiled:
    """TVM's stock path: ``relax.get_pipeline("zero")`` and a build, no schedules, the weights
    passed at every call (the "TVM untuned" column); same arguments and result as
    :func:`compile`."""
    start = _clock.perf_counter()
    target, source = cpu_target(target), ModelSource.of(model, params, reference, inputs)
    with target:
        mod = tvm_api.relax.get_pipeline("zero")(safe_indexing(fixed(source.mod)))
    weights = tuple(tvm_api.tensor(np.ascontiguousarray(w), tvm_api.cpu(0)) for w in source.weights)
    return build_compiled(source, "untuned", target, mod, weights, None, start)


def bind_and_lower(source: "ModelSource", target):
    """The source's module with its weights bound as constants, TVM's build bugs worked
    around (:mod:`~tvm_ext.model_pipeline.relax_fixes`) and its index kernels kept inside
    their tables (:func:`~tvm_ext.model_pipeline.index_guard.safe_indexing`), lowered by
    :func:`lower`: the module whose PrimFuncs the rules schedule and the model tuner tunes."""
    bound = tvm_api.relax.transform.BindParams(source.entry, source.bind_map())(source.mod)
    return lower(safe_indexing(fixed(bound)), target, source.entry)


def lower(mod, target, entry: str):
    """Legalize, fold constants and fuse a Relax module whose weights are bound (the zero
        pipeline's passes, plus inference-time decomposition before and dead-code removal after,
        so the PrimFuncs only weights fed are folded away and not scheduled for nothing), with fast
    math and the weights marked for the rules' repacking."""
    transform = tvm_api.relax.transform
    passes = tvm_api.transform.Sequential(
        [
            transform.DecomposeOpsForInference(),
            transform.CanonicalizeBindings(),
            # exp, erf, tanh as polynomials TIR can vectorize (libm's are scalar calls): softmax,
            # GELU and the sigmoid (written so first: activations_as_fast_math) at vector speed.
            transform.FastMathTransform(),
            # Weights folded first (a Linear's transpose), so an odd output axis is padded
            # once, at compile time (layout.whole_vector_weights).
            transform.FoldConstant(),
            # A batch norm after a convolution into its weight and one bias, at compile time.
            tvm_api.transform.module_pass(
                lambda m, _ctx: folded_batch_norm(m), opt_level=0, name="FoldedBatchNorm"
            ),
            tvm_api.transform.module_pass(
                lambda m, _ctx: whole_vector_weights(m, lanes_for(target, 32)),
                opt_level=0,
                name="WholeVectorWeights",
            ),
            transform.LegalizeOps(LEGALIZE),
            transform.AnnotateTIROpPattern(),
            transform.FoldConstant(),
            transform.FuseOps(),
            transform.FuseTIR(),
            # A reshape FuseOps left alone is a view the VM makes at no cost (relax.build does
            # this too, but after the rules have scheduled it into a loop nest it no longer
            # recognizes: Llama's grouped-query repeat over a symbolic cache copied its keys
            # and values once more a layer; its decode step at 1024 tokens 18.0 -> 14.6 ms).
            transform.RewriteDataflowReshape(),
            transform.DeadCodeElimination([entry]),
            # Mark which PrimFunc parameters are weights (bound constants): the rules may then
            # repack them once, at compile time (see repacks.fold_prepacks).
            transform.AttachAttrLayoutFreeBuffers(),
        ]
    )
    with target:
        mod = channels_last(outside_taps_dropped(fills_as_scalars(mod)))
        mod = transposes_before_reshapes(activations_as_fast_math(mod))
        return passes(reshapes_merged(matmuls_before_reshapes(mod)))


def build_compiled(source, path, target, mod, weights, applied, start) -> Compiled:
    """Build ``mod`` (the source's module, lowered and scheduled) into a :class:`Compiled`,
    its parity checked when the source has a reference and inputs; ``start`` is the
    ``perf_counter`` the compile began at."""
    kernels = tuple(tvm_api.called_prim_funcs(mod[source.entry]))
    executable = tvm_api.relax.build(mod, target=target)
    vm = tvm_api.relax.VirtualMachine(executable, tvm_api.cpu(0))
    checkable = source.inputs is not None and source.reference is not None
    compiled = Compiled(
        source.name,
        path,
        target,
        executable,
        vm,
        source.entry,
        source.input_specs,
        weights,
        kernels,
        applied,
        source.reference,
        source.inputs,
        checkable,
        source.flops,
        0.0,
        input_names=tuple(str(v.name) for v in source.input_vars),
        index_checks=index_checks(source.mod[source.entry], source.input_vars),
        module=mod,
        bounds=tvm_api.symbolic_bounds(source.mod[source.entry]),
    )
    if checkable:
        errors = compiled.check()
        log.info("%s (%s): parity max abs %.3g, rel %.3g", source.name, path, *errors)
    return dataclasses.replace(compiled, compile_seconds=_clock.perf_counter() - start)


@dataclasses.dataclass(frozen=True, eq=False)
class ModelSource:
    """What compile (and the model tuner) starts from, whatever it was given: the module, its
    entry function, the weights to bind (by parameter), the inputs' specs, and the reference
    if any."""

    name: str
    mod: object
    entry: str
    weight_vars: tuple
    weights: tuple[np.ndarray, ...]
    input_specs: tuple[InputSpec, ...]
    reference: Reference | None
    inputs: tuple[np.ndarray, ...] | None
    flops: int | None

    @staticmethod
    def of(model, params, reference, inputs) -> "ModelSource":
        if isinstance(model, Model):
            if params is not None or reference is not None or inputs is not None:
                raise ValueError(
                    "a zoo Model carries its params, reference and inputs; pass none of them"
                )
            return ModelSource.from_module(
                model.mod, list(model.params), model.reference, model.inputs, model.key, model.flops
            )
        if not isinstance(model, tvm_api.IRModule):
            raise TypeError(f"expected a zoo Model or a Relax IRModule, got {type(model).__name__}")
        return ModelSource.from_module(model, params, reference, inputs, None, None)

    @staticmethod
    def from_module(mod, params, reference, inputs, name, flops) -> "ModelSource":
        entry = tvm_api.relax_entry(mod)
        if params is None:  # from_exported_program(keep_params_as_input=True) keeps them here
            mod, detached = tvm_api.relax.frontend.detach_params(mod)
            params = [w.numpy() for w in detached.get(entry, [])]
        variables = list(mod[entry].params)
        described = tvm_api.relax_params(mod[entry])
        names = [name for name, _, _ in described]
        if isinstance(params, dict):
            unknown = sorted(set(params) - set(names))
            if unknown:
                raise ValueError(f"{entry} has no parameters {unknown}; it has {names}")
            taken = [names.index(k) for k in params]
        elif len(params) > len(variables):
            raise ValueError(f"{len(params)} params for the {len(variables)} parameters of {entry}")
        else:  # the weights are the last parameters: inputs come first
            taken = list(range(len(variables) - len(params), len(variables)))
        weights = tuple(
            np.asarray(w) for w in (params.values() if isinstance(params, dict) else params)
        )
        return ModelSource(
            name or entry,
            mod,
            entry,
            tuple(variables[i] for i in taken),
            weights,
            tuple((dims, dtype) for i, (_, dims, dtype) in enumerate(described) if i not in taken),
            reference,
            None if inputs is None else tuple(inputs),
            flops,
        )

    @property
    def input_vars(self) -> tuple:
        """The entry function's parameters that are inputs (not weights), in call order."""
        return tuple(input_vars(self.mod[self.entry], self.weight_vars))

    def bind_map(self) -> dict:
        dev = tvm_api.cpu(0)
        return {
            v: tvm_api.tensor(np.ascontiguousarray(w), dev)
            for v, w in zip(self.weight_vars, self.weights)
        }


def cpu_target(target):
    """``target`` as a Target (default the host); ValueError unless it is an llvm target."""
    target = as_target(target)
    if target.kind.name != "llvm":
        raise ValueError(f"compile builds for CPU (llvm) targets; got {target.kind.name}")
    return target


__all__ = [
    "Compiled",
    "ModelSource",
    "Timing",
    "bind_and_lower",
    "build_compiled",
    "compile",
    "compile_untuned",
    "cpu_target",
    "lower",
]
