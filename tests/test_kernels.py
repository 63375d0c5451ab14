import re

import numpy as np
import pytest

from tvm_ext import kernels as K
from tvm_ext.base import tvm_api
from tvm_ext.measurement.measure import check_parity, run

CASES = [
    (K.matmul, dict(M=8, N=12, K=16)),
    (K.matmul, dict(M=7, N=5, K=3, dtype="float16")),
    (K.matmul, dict(M=7, N=5, K=9, dtype="bfloat16", transpose_b=True)),
    (K.matmul, dict(M=6, N=10, K=64, dtype="int8")),
    (K.batch_matmul, dict(batch=3, M=4, N=5, K=6)),
    (K.batch_matmul, dict(batch=2, M=4, N=4, K=32, dtype="int8")),
    (K.conv2d, dict(N=2, C=3, H=9, W=7, F=4, KH=3, KW=3, stride=2, padding=1)),
    (K.conv2d, dict(N=1, C=2, H=5, W=5, F=3, KH=1, KW=1, dtype="float16")),
    (K.softmax, dict(M=5, N=33)),
    (K.softmax, dict(M=3, N=17, dtype="float16")),
    (K.softmax, dict(M=5, N=33, exp="poly")),
    (K.layernorm, dict(M=4, N=31)),
    (K.layernorm, dict(M=4, N=16, dtype="float16", eps=1e-3)),
    (K.rmsnorm, dict(M=6, N=19)),
    (K.axpy, dict(n=37, alpha=-0.5)),
    (K.axpy, dict(n=16, dtype="float16")),
]


@pytest.mark.parametrize("ctor,args", CASES, ids=lambda v: getattr(v, "__name__", str(v)))
def test_unscheduled_kernel_matches_its_numpy_reference(ctor, args, host):
    w = ctor(**args)
    arrays = w.inputs(seed=3)
    specs = tvm_api.param_specs(w.func)
    assert [(a.shape, a.dtype) for a in arrays] == [(s, K.np_dtype(d)) for s, d in specs]
    assert all(not arrays[i].any() for i in w.outputs), "outputs must be zero-filled"
    result = run(tvm_api.build(tvm_api.as_module(w.func), host), arrays, tvm_api.cpu(0))
    check_parity([result[i] for i in w.outputs], w.reference(arrays), w.key)


def test_closed_form_flops_and_bytes():
    assert K.matmul(64, 32, 16).flops == 2 * 64 * 32 * 16
    assert K.matmul(64, 32, 16).min_bytes == 4 * (64 * 16 + 16 * 32 + 64 * 32)
    assert K.matmul(64, 32, 16, "int8").min_bytes == 64 * 16 + 16 * 32 + 4 * 64 * 32
    assert K.batch_matmul(3, 4, 5, 6).flops == 2 * 3 * 4 * 5 * 6
    conv = K.conv2d(1, 64, 56, 56, 64, 3, 3, padding=1)
    assert conv.flops == 2 * 64 * 56 * 56 * 64 * 9
    assert conv.min_bytes == 4 * (64 * 56 * 56 * 2 + 64 * 64 * 9)
    assert K.conv2d(1, 1, 8, 8, 1, 3, 3, stride=2).flops == 2 * 3 * 3 * 9
    assert K.softmax(4, 8).flops == 5 * 32
    assert K.layernorm(4, 8).flops == 8 * 32
    assert K.rmsnorm(4, 8).flops == 4 * 32
    assert K.axpy(100).flops == 200 and K.axpy(100).min_bytes == 1200


def test_inputs_are_seeded_and_reproducible():
    w = K.matmul(8, 8, 8)
    a, b, c = w.inputs(1), w.inputs(1), w.inputs(2)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not np.array_equal(a[0], c[0])


def test_axpy_is_written_in_tvmscript_and_others_in_te():
    # TE-made functions name their blocks after the compute (matmul's is "C"); the TVMScript
    # axpy has one block, named after its output "z", and keeps that name when scheduled.
    def blocks(func):
        return [b for b in re.findall(r'T\.sblock\("(\w+)"\)', func.script()) if b != "root"]

    assert blocks(K.axpy(8).func) == ["z"]
    assert blocks(K.matmul(4, 4, 4).func) == ["C"]
    sch = tvm_api.Schedule(K.axpy(8).func)
    sch.split(sch.get_loops(sch.get_sblock("z"))[0], [None, 4])
    assert blocks(tvm_api.main_func(sch.mod)) == ["z"]


def test_workload_survives_scheduling_via_its_attribute():
    w = K.layernorm(4, 8, eps=1e-3)
    sch = tvm_api.Schedule(w.func)
    back = K.from_func(tvm_api.main_func(sch.mod))
    assert back.key == w.key and back.args["eps"] == 1e-3
    assert K.from_func(K.matmul(2, 2, 2).func.without_attr(K.WORKLOAD_ATTR)) is None


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: K.matmul(0, 4, 4), r"M=0 must be a positive int"),
        (lambda: K.matmul(4, -1, 4), r"N=-1 must be a positive int"),
        (lambda: K.matmul(4, 4, 2.5), r"K=2.5 must be a positive int"),
        (lambda: K.matmul(4, 4, True), r"K=True must be a positive int"),
        (
            lambda: K.matmul(4, 4, 4, "float64"),
            r"dtype='float64' is not supported; choose one of \('float32'",
        ),
        (lambda: K.softmax(4, 4, "int8"), r"softmax: dtype='int8' is not supported"),
        (lambda: K.softmax(4, 4, exp="fast"), r"exp='fast': choose one of"),
        (lambda: K.conv2d(1, 1, 2, 2, 1, 3, 3), r"kernel 3x3 does not fit the padded input 2x2"),
        (lambda: K.conv2d(1, 1, 8, 8, 1, padding=-1), r"padding=-1 must be an int >= 0"),
        (lambda: K.layernorm(4, 4, eps=0.0), r"eps=0.0 must be a positive float"),
        (lambda: K.axpy(4, alpha=float("nan")), r"alpha=nan must be a finite number"),
    ],
)
def test_bad_arguments_are_value_errors_showing_the_value(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_transpose_b_must_be_bool():
    with pytest.raises(TypeError, match="transpose_b='yes'"):
        K.matmul(4, 4, 4, transpose_b="yes")


def test_polynomial_exp_is_accurate_over_the_float32_range(host):
    """exp_poly against numpy's exp on a dense grid of [-87, 88] (normal float32 results)."""
    from tvm_ext.base.tvm_api import te, tvm
    from tvm_ext.workloads.kernels_rows import exp_poly

    n = 1 << 16
    X = te.placeholder((n,), "float32", name="X")
    Y = te.compute((n,), lambda i: exp_poly(X[i]), name="Y")
    lib = tvm.tirx.build(te.create_prim_func([X, Y]), target=host)
    x = np.linspace(-87.0, 88.0, n, dtype="float32")
    y = tvm.runtime.tensor(np.zeros(n, "float32"))
    lib(tvm.runtime.tensor(x), y)
    exact = np.exp(x.astype("float64"))
    assert np.max(np.abs(y.numpy() - exact) / exact) < 3e-7


def test_poly_softmax_key_round_trips():
    w = K.softmax(8, 16, exp="poly")
    assert w.key == "softmax_M8_N16_exppoly_float32"
    assert K.from_func(w.func).key == w.key and K.softmax(8, 16).key.endswith("N16_float32")
