"""The compiled model's boundary: every input a call passes is checked (number, kind, rank,
shape, dtype, and each index against the table it indexes) and every index kernel stays inside
its table, so no input can crash the process or read outside a buffer.

The cases that would crash the process if a check were missing run in a process of their own
(``boundary_cases.py``): a crash there is a failed test, not a dead test session.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import boundary_cases as cases
import numpy as np
import pytest

import tvm_ext
from tvm_ext.base import tvm_api
from tvm_ext.base.errors import InputError, TvmExtError
from tvm_ext.model_pipeline.boundary import index_checks
from tvm_ext.model_pipeline.index_guard import safe_indexing

HERE = pathlib.Path(__file__).resolve().parent
relax = tvm_api.relax


def in_own_process(*args: str) -> dict:
    done = subprocess.run(
        [sys.executable, str(HERE / "boundary_cases.py"), *args],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, (
        f"the case died with exit code {done.returncode} (-11: a segmentation fault)\n"
        f"{done.stderr[-3000:]}"
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def model():
    return cases.compiled()


def test_out_of_range_and_negative_ids_raise_our_error_at_every_entry_never_a_crash():
    result = in_own_process("bad_ids")
    for path in ("ours", "untuned"):
        for label, raised in result[path].items():
            for entry in ("run", "check", "time"):
                err = raised[entry]
                assert err is not None, f"{path}: {label} id passed {entry}()"
                assert err["position"] == [0, 3] and err["valid"] == [0, cases.VOCAB]
                assert "'input_ids'" in err["message"] and str(err["value"]) in err["message"]
                assert "word_embeddings" in err["message"]
            # past the checks, straight into the VM: the lookup clamps, it does not read
            # outside the table
            assert raised["vm_matches_clamped"], f"{path}: {label}"
    assert result["ours"]["huge"]["run"]["value"] == 10_000_000


def test_random_ids_give_a_result_or_our_error_never_a_crash():
    seen = in_own_process("random_ids", "150")
    assert seen["results"] > 0 and seen["errors"] > 0, seen  # both sides were exercised


def test_the_error_is_a_value_error_and_ours(model):
    inputs = cases.good_inputs()
    inputs[1][0] = cases.POSITIONS  # through the int32 -> int64 cast
    with pytest.raises(InputError, match=r"'positions' holds 32 at position \(0,\)") as info:
        model.run(*inputs)
    assert isinstance(info.value, ValueError) and isinstance(info.value, TvmExtError)
    assert info.value.valid == (0, cases.POSITIONS) and info.value.input == "positions"


def test_the_checks_follow_value_keeping_ops_to_the_tables(model):
    checks = {c.name: c for c in model.index_checks}
    assert set(checks) == {"input_ids", "positions"}
    assert checks["input_ids"].extents == (cases.VOCAB,) and checks["input_ids"].input == 0
    assert checks["positions"].extents == (cases.POSITIONS,) and checks["positions"].input == 1
    assert model.input_names == ("input_ids", "positions", "scale")


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda x: x[:2], r"takes 3 inputs \(input_ids: int64 \(1, 8\), positions: int32 \(8,\)"),
        (lambda x: x + [x[2]], "takes 3 inputs .* got 4"),
        (lambda x: [x[0].reshape(-1), *x[1:]], r"takes rank 2 \(shape \(1, 8\)\), got rank 1"),
        (lambda x: [np.zeros((1, 9), np.int64), *x[1:]], r"takes shape \(1, 8\), got \(1, 9\)"),
        (lambda x: [x[0].astype(np.float32), *x[1:]], "takes int64, got float32: an integer"),
        (lambda x: [x[0].astype(np.int32), *x[1:]], "'input_ids' takes int64, got int32$"),
        (lambda x: [x[0], x[1], x[2].astype(np.float64)], "'scale' takes float32, got float64$"),
        (lambda x: [np.array([[object()] * 8]), *x[1:]], "got an array of object"),
        (lambda x: [[["a"] * 8], *x[1:]], "got an array of <U1"),
    ],
    ids=[
        "too few",
        "too many",
        "rank",
        "shape",
        "float ids",
        "int32 ids",
        "float64",
        "object",
        "strings",
    ],  # fmt: skip
)
def test_each_bad_input_kind_has_one_clear_error(model, change, message):
    with pytest.raises(InputError, match=message):
        model.run(*change(cases.good_inputs()))


def test_arrays_it_can_take_are_taken_as_they_come(model):
    ids, positions, scale = cases.good_inputs()
    expected = cases.reference([ids, positions, scale])
    strided = np.repeat(scale, 2, axis=1)[:, ::2]  # not contiguous
    assert not strided.flags.c_contiguous
    big_endian = ids.astype(">i8")
    from_lists = ids.tolist()  # a nested list is an int64 array to numpy
    got = model.run(big_endian, positions, strided)
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    np.testing.assert_allclose(model.run(from_lists, positions, scale), expected, rtol=1e-5)


def test_nan_and_infinite_floats_are_data(model):
    ids, positions, scale = cases.good_inputs()
    scale[0, 0], scale[1, 1] = np.nan, np.inf
    out = model.run(ids, positions, scale)
    assert np.isnan(out[0, 0]) and np.isinf(out[1, 1]) and np.isfinite(out[2:]).all()


def small(make, shapes: dict):
    bb = relax.BlockBuilder()
    params = [relax.Var(n, relax.TensorType(s, d)) for n, (s, d) in shapes.items()]
    with bb.function("main", params):
        with bb.dataflow():
            out = bb.emit_output(make(*params))
        bb.emit_func_output(out)
    return bb.get()


DATA = np.arange(30, dtype=np.float32).reshape(6, 5)


def test_index_tensor_wraps_negative_indices_as_torch_does():
    # TVM 0.27 lowers index_tensor without the wrap (a negative index reads outside the
    # data) and cannot fuse it after a computed index; the guard makes it take / gather_nd.
    one = small(lambda i, d: relax.op.index_tensor(d, [i]),
                {"idx": ((4,), "int64"), "data": ((6, 5), "float32")})  # fmt: skip
    idx = np.array([-1, 0, 5, -6], np.int64)
    compiled = tvm_ext.compile(one, params=[DATA], reference=lambda x: DATA[x[0]], inputs=[idx])
    with pytest.raises(InputError, match=r"\[-6, 6\)"):
        compiled.run(np.array([0, 0, 6, 0], np.int64))
    two = small(
        lambda i, d: relax.op.index_tensor(d, [i, relax.op.add(i, relax.const(1, "int64"))]),
        {"idx": ((4,), "int64"), "data": ((6, 5), "float32")},
    )
    idx = np.array([-1, 0, 3, -5], np.int64)
    tvm_ext.compile(two, params=[DATA], reference=lambda x: DATA[x[0], x[0] + 1], inputs=[idx])


def test_gathers_are_checked_per_axis():
    elements = small(lambda i, d: relax.op.gather_elements(d, i, axis=1),
                     {"idx": ((6, 2), "int64"), "data": ((6, 5), "float32")})  # fmt: skip
    idx = np.tile(np.array([[4, 0]], np.int64), (6, 1))
    compiled = tvm_ext.compile(elements, params=[DATA], inputs=[idx],
                               reference=lambda x: np.take_along_axis(DATA, x[0], 1))  # fmt: skip
    idx[5, 1] = 5
    with pytest.raises(InputError, match=r"holds 5 at position \(5, 1\).*\[0, 5\).*axis 1"):
        compiled.run(idx)
    nd = small(lambda i, d: relax.op.gather_nd(d, i),
               {"idx": ((3, 2), "int64"), "data": ((6, 5), "float32")})  # fmt: skip
    idx = np.array([[5, 4], [0, 0], [2, 3]], np.int64)
    compiled = tvm_ext.compile(nd, params=[DATA], inputs=[idx],
                               reference=lambda x: DATA[x[0][:, 0], x[0][:, 1]])  # fmt: skip
    idx[0, 1] = 5  # the column of axis 1 (extent 5); 5 is in range for axis 0
    with pytest.raises(InputError, match=r"position \(0, 1\).*\[0, 5\).*axis 1"):
        compiled.run(idx)
    idx[0, 1], idx[2, 0] = 4, 6
    with pytest.raises(InputError, match=r"position \(2, 0\).*\[0, 6\).*axis 0"):
        compiled.run(idx)


def test_a_computed_index_is_not_checked_but_its_kernel_clamps():
    # ids + 1 is no input: the boundary cannot check it, the kernel stays inside the table.
    mod = small(lambda i, d: relax.op.take(d, relax.op.add(i, relax.const(1, "int64")), axis=0),
                {"idx": ((2,), "int64"), "data": ((6, 5), "float32")})  # fmt: skip
    compiled = tvm_ext.compile(mod, params=[DATA], inputs=[np.array([0, 4], np.int64)],
                               reference=lambda x: DATA[x[0] + 1])  # fmt: skip
    assert compiled.index_checks == ()
    np.testing.assert_array_equal(compiled.run(np.array([5, 10**9], np.int64)), DATA[[5, 5]])


def test_float_casts_are_not_followed_and_in_range_constants_are_left_alone():
    mod = small(lambda x, d: relax.op.take(d, relax.op.astype(x, "int64"), axis=0),
                {"x": ((2,), "float32"), "data": ((6, 5), "float32")})  # fmt: skip
    assert index_checks(mod["main"], mod["main"].params[:1]) == ()  # a cast that changes values
    const = small(lambda d: relax.op.gather_elements(d, relax.const(np.zeros((6, 1)), "int64")),
                  {"data": ((6, 5), "float32")})  # fmt: skip
    assert tvm_api.same_structure(safe_indexing(const), const)
    fast = small(lambda i, d: relax.op.take(d, i, axis=0),
                 {"idx": ((2,), "int64"), "data": ((6, 5), "float32")})  # fmt: skip
    assert "clip" in safe_indexing(fast).script() and "fast" in fast.script()
