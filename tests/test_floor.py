"""The proven floor of a function: below every schedule's bound and every measured run."""

from __future__ import annotations

import pytest
from tvm_ext.cost import RooflinePolicy, evaluate, floor_s

from tvm_ext import kernels as K
from tvm_ext import measure
from tvm_ext import schedules as S


@pytest.mark.parametrize(
    "w", [K.matmul(96, 64, 128), K.softmax(64, 256), K.conv2d(1, 8, 14, 14, 8, 3, 3, 1, 1)]
)
def test_the_floor_is_below_every_schedule(w, host, machine):
    floor = floor_s(w.func, host, machine=machine)
    assert floor is not None and floor > 0
    policy = RooflinePolicy()
    for obj in (w.func, S.schedule(w, host)):
        bound = evaluate(policy, obj, host, machine=machine).lower_bound_s
        assert floor <= bound * (1 + 1e-9), (w.key, floor, bound)
    # The floor is the FLOPs on every core at full width: a naive (one core, scalar) schedule
    # sits far above it, and every run at or above it.
    naive = evaluate(policy, w.func, host, machine=machine).lower_bound_s
    assert naive > 1.5 * floor
    assert measure(S.schedule(w, host), w, host, repeat=3).seconds >= floor


def test_a_gathers_table_is_not_compulsory_traffic(host, machine):
    """An embedding lookup touches the rows its ids name (all equal: one row), not its table:
    counting the whole table (8 MB here) put the floor of 16 ids above the measured time."""
    from tvm_ext.cost import features

    from tvm_ext.base import tvm_api

    relax = tvm_api.relax
    bb = relax.BlockBuilder()
    table = relax.Var("table", relax.TensorType((32768, 64), "float32"))
    ids = relax.Var("ids", relax.TensorType((16,), "int64"))
    with bb.function("main", [table, ids]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.take(table, ids, axis=0, mode="clip"))
        bb.emit_func_output(out)
    lowered = relax.transform.LegalizeOps()(bb.get())
    func = next(f for f in lowered.functions.values() if isinstance(f, tvm_api.PrimFunc))
    assert tvm_api.gathered_params(func) == {0}
    assert features(func, host).bytes["dram"][0] == 16 * 8 + 16 * 64 * 4  # ids and output
    floor = floor_s(func, host, machine=machine)
    # measure's random ids lie in [-8, 8): the clip mode keeps them in the table
    seconds = measure(func, None, host, reference=func, repeat=3).seconds
    assert floor is not None and floor <= seconds


def test_a_shift_node_is_counted_as_the_shift_call_is(host, machine):
    """A polynomial ``exp`` builds its power of two with a shift, an ``LShift`` node as TE and
    a function bound to a length write it (``PrimFunc.specialize``: the profile binds a
    symbolic model's kernels so), which the walker did not count: a masked softmax at a bound
    length had no FLOPs and no floor."""
    from tvm import te
    from tvm_ext.cost import features

    x = te.placeholder((64,), "int32", name="x")
    y = te.compute((64,), lambda i: (x[i] << 23) + 1, name="y")
    func = te.create_prim_func([x, y])
    assert "<<" in func.script()
    assert features(func, host).flops == 2 * 64
    assert floor_s(func, host, machine=machine) > 0


def test_a_repeated_subexpression_is_counted_once(host, machine):
    """TE inlines a shared value at every use: ``fast_erf`` (BERT's GELU) writes its clamped
    input 22 times and its square 11, which LLVM computes once. Counting every copy (74
    operations, 21 multiplies an element for its 25 and 12) put the floor of BERT's GELU at
    1.47x its measured time (384 x 3072, Zen 3): a bound that reads high drops a winner."""
    from tvm import te, topi
    from tvm_ext.cost import features

    from tvm_ext.base import tvm_api

    x = te.placeholder((128, 768), "float32", name="x")
    y = te.compute(x.shape, lambda i, j: x[i, j] * 0.5, name="half")
    gelu = te.compute(x.shape, lambda i, j: y[i, j] * (1.0 + topi.fast_erf(x)[i, j]), name="gelu")
    func = te.create_prim_func([x, gelu])
    erf = next(b for b in features(func, host).blocks if "erf" in b.name)
    # clamp 2, square 1, numerator 6 multiply-adds and x, denominator 4, divide 1
    assert (erf.flops_per_instance, erf.muls_per_instance) == (25, 12)
    floor = floor_s(func, host, machine=machine)
    scheduled = S.apply(tvm_api.as_module(func), host).mod
    seconds = measure(scheduled, None, host, reference=func, repeat=3).seconds
    assert floor is not None and floor <= seconds, (floor, seconds)
