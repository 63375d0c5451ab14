"""A kernel as a model has it: Relax operators legalized and fused into one PrimFunc, for
tests and benchmarks of the rules on the functions a model's lowering gives them."""

from __future__ import annotations

from tvm_ext.base import tvm_api


def legalized_func(build, params, free=()):
    """The one PrimFunc a Relax function ``build(*vars)`` legalizes and fuses to (``params``:
    ``(name, shape)`` pairs of float32 tensors), its parameters at ``free`` marked layout-free,
    as Relax marks a model's weights."""
    relax = tvm_api.relax
    bb = relax.BlockBuilder()
    variables = [relax.Var(name, relax.TensorType(shape, "float32")) for name, shape in params]
    with bb.function("main", variables):
        with bb.dataflow():
            out = bb.emit_output(build(*variables))
        bb.emit_func_output(out)
    passes = [
        relax.transform.LegalizeOps(),
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FuseOps(),
        relax.transform.FuseTIR(),
    ]
    mod = tvm_api.transform.Sequential(passes)(bb.get())
    (func,) = [f for f in mod.functions.values() if isinstance(f, tvm_api.PrimFunc)]
    return func.with_attr("layout_free_buffers", list(free)) if free else func


__all__ = ["legalized_func"]
