"""``matmul_reshapes``: a reshape of a batched matmul's result moves onto its operands where it
only regroups the batch axes, so the scale and the mask fuse into the scores' matmul."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax

from tvm_ext.base import tvm_api
from tvm_ext.model_pipeline.matmul_reshapes import matmuls_before_reshapes

HEADS, WIDTH = 3, 8


def _scores(n, out_shape=None, twice=False):
    """``reshape(matmul(q, k), out_shape) * 0.25 + mask``, as torch.export leaves attention's
    scores; with ``twice`` the matmul's result is also returned."""
    q = relax.Var("q", relax.TensorType((HEADS, n, WIDTH), "float32"))
    k = relax.Var("k", relax.TensorType((HEADS, WIDTH, n), "float32"))
    mask = relax.Var("mask", relax.TensorType((1, 1, n, n), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [q, k, mask]):
        with bb.dataflow():
            s = bb.emit(relax.op.matmul(q, k))
            r = bb.emit(relax.op.reshape(s, out_shape or (1, HEADS, n, n)))
            if out_shape is None:
                r = bb.emit(relax.op.add(relax.op.multiply(r, relax.const(0.25)), mask))
            out = bb.emit_output(relax.Tuple([r, s]) if twice else r)
        bb.emit_func_output(out)
    return bb.get()


def _calls(mod) -> list[str]:
    return [tvm_api.call_name(v) for _, v in tvm_api.bindings(mod["main"])]


@pytest.mark.parametrize("symbolic", [False, True])
def test_the_scale_and_the_mask_fuse_into_the_scores_matmul(host, symbolic):
    from tvm_ext.model_pipeline.compile import lower

    n = tvm.tirx.Var("n", "int64") if symbolic else 10
    mod = _scores(n)
    moved = matmuls_before_reshapes(mod)
    calls = _calls(moved)
    # The matmul now follows the reshapes of its operands and computes the 4-D scores.
    assert calls.index("relax.matmul") > calls.index("relax.reshape")
    (matmul,) = [
        v for _, v in tvm_api.bindings(moved["main"]) if tvm_api.call_name(v) == "relax.matmul"
    ]
    assert len(tvm_api.shape_values(matmul)) == 4
    lowered = lower(mod, host, "main")  # the compile pipeline moves it
    names = [
        gv.name_hint for gv, f in lowered.functions.items() if isinstance(f, tvm.tirx.PrimFunc)
    ]
    assert any("matmul" in name and "multiply" in name and "add" in name for name in names), names
    # The values: run both modules.
    length = 10
    rng = np.random.default_rng(0)
    args = [
        rng.standard_normal((HEADS, length, WIDTH)).astype("float32"),
        rng.standard_normal((HEADS, WIDTH, length)).astype("float32"),
        rng.standard_normal((1, 1, length, length)).astype("float32"),
    ]
    want = (args[0] @ args[1]).reshape(1, HEADS, length, length) * 0.25 + args[2]
    vm = relax.VirtualMachine(tvm.compile(lowered, target=host), tvm.cpu())
    got = vm["main"](*(tvm.runtime.tensor(a) for a in args)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_reshape_of_the_matrix_axes_or_a_shared_result_stays():
    """A reshape that changes the matrix axes (rows merged with the batch) is no regrouping of
    the batch; a matmul whose result is used twice would be computed twice."""
    for mod in (_scores(10, out_shape=(HEADS * 10, 10)), _scores(10, twice=True)):
        moved = matmuls_before_reshapes(mod)
        assert tvm_api.same_structure(moved["main"], relax.transform.Normalize()(mod)["main"])


def test_an_operand_broadcast_along_the_batch_stays():
    """Keys shared by every head (batch 1 against 3): reshaping them to the regrouped batch
    would change their element count."""
    q = relax.Var("q", relax.TensorType((HEADS, 10, WIDTH), "float32"))
    k = relax.Var("k", relax.TensorType((1, WIDTH, 10), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [q, k]):
        with bb.dataflow():
            s = bb.emit(relax.op.matmul(q, k))
            out = bb.emit_output(relax.op.reshape(s, (1, HEADS, 10, 10)))
        bb.emit_func_output(out)
    mod = bb.get()
    assert tvm_api.same_structure(matmuls_before_reshapes(mod)["main"], mod["main"])


def test_a_result_the_block_also_outputs_stays():
    """The matmul's result leaves the dataflow block too (used after it): moved, the reshape
    would get a matmul of its own and the original would still run for the later use."""
    q = relax.Var("q", relax.TensorType((HEADS, 10, WIDTH), "float32"))
    k = relax.Var("k", relax.TensorType((HEADS, WIDTH, 10), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [q, k]):
        with bb.dataflow():
            s = bb.emit_output(relax.op.matmul(q, k))
            r = bb.emit_output(relax.op.reshape(s, (1, HEADS, 10, 10)))
        out = bb.emit(relax.Tuple([r, s]))
        bb.emit_func_output(out)
    mod = bb.get()
    moved = matmuls_before_reshapes(mod)
    assert _calls(moved).count("relax.matmul") == 1, moved["main"]


def test_a_reshape_of_a_reshape_is_one_view(host):
    """torch's attention reshapes its probabilities twice before the values' matmul: two
    reshapes in a row fused into a kernel that copied them; merged, the pair is one reshape,
    which the pipeline makes a view (no kernel)."""
    from tvm_ext.model_pipeline.compile import lower
    from tvm_ext.model_pipeline.matmul_reshapes import reshapes_merged

    x = relax.Var("x", relax.TensorType((1, HEADS, 10, 10), "float32"))
    v = relax.Var("v", relax.TensorType((HEADS, 10, WIDTH), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x, v]):
        with bb.dataflow():
            p = bb.emit(relax.op.nn.softmax(x, axis=-1))
            r = bb.emit(relax.op.reshape(p, (1, HEADS * 10, 10)))
            r = bb.emit(relax.op.reshape(r, (HEADS, 10, 10)))
            out = bb.emit_output(relax.op.matmul(r, v))
        bb.emit_func_output(out)
    mod = bb.get()
    assert _calls(reshapes_merged(mod)).count("relax.reshape") == 1
    lowered = lower(mod, host, "main")
    kernels = [
        gv.name_hint for gv, f in lowered.functions.items() if isinstance(f, tvm.tirx.PrimFunc)
    ]
    assert not any("reshape" in k for k in kernels), kernels
    rng = np.random.default_rng(0)
    args = [rng.standard_normal((1, HEADS, 10, 10)), rng.standard_normal((HEADS, 10, WIDTH))]
    args = [a.astype("float32") for a in args]
    e = np.exp(args[0] - args[0].max(-1, keepdims=True))
    want = (e / e.sum(-1, keepdims=True)).reshape(HEADS, 10, 10) @ args[1]
    vm = relax.VirtualMachine(tvm.compile(lowered, target=host), tvm.cpu())
    got = vm["main"](*(tvm.runtime.tensor(a) for a in args)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
