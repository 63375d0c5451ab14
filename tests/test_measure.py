import dataclasses

import numpy as np
import pytest
from tvm import te
from tvm_ext.schedules.teaching.lecture import LectureConfig, lecture_cpu_matmul

import tvm_ext
from tvm_ext import kernels as K
from tvm_ext.base import tvm_api
from tvm_ext.base.errors import ParityError, ThreadConfigError
from tvm_ext.measurement.measure import check_parity


def _wrong_matmul(M, N, Kd):
    """A kernel with the workload's signature that computes A @ B + 1."""
    A = te.placeholder((M, Kd), name="A")
    B = te.placeholder((Kd, N), name="B")
    k = te.reduce_axis((0, Kd), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j] + 1.0 / Kd, axis=k), name="C")
    return te.create_prim_func([A, B, C])


def test_measure_reports_the_three_numbers(host, machine):
    w = K.matmul(64, 48, 32)
    m = tvm_ext.measure(lecture_cpu_matmul(w, LectureConfig(16, 4)), w, host, repeat=3)
    assert m.max_rel_error < 1e-4 and m.threads == int(host.attrs["num-cores"])
    assert m.flops == w.flops and m.gflops == pytest.approx(w.flops / m.seconds / 1e9)
    assert m.min_seconds <= m.seconds and m.spread >= 0 and m.repeats == 3
    assert m.peak_fraction == pytest.approx(m.gflops * 1e9 / machine.peak("float32"))
    assert 0 < m.roofline_fraction


def test_measure_accepts_schedule_module_and_primfunc(host):
    w = K.axpy(1000)
    for obj in (tvm_api.Schedule(w.func), tvm_api.as_module(w.func), w.func):
        assert tvm_ext.measure(obj, target=host, repeat=2).max_abs_error < 1e-6


def test_parity_failure_raises_and_reports_no_speed(host):
    w = K.matmul(16, 16, 16)
    with pytest.raises(ParityError, match="matmul_M16_N16_K16_float32: output 0") as info:
        tvm_ext.measure(_wrong_matmul(16, 16, 16), w, host)
    assert info.value.max_abs_error == pytest.approx(1.0, rel=1e-4)


def test_reference_module_path(host):
    w = K.matmul(24, 24, 24)
    plain = w.func.without_attr(K.WORKLOAD_ATTR)
    sch = lecture_cpu_matmul(dataclasses.replace(w, func=plain), LectureConfig(8, 4))
    m = tvm_ext.measure(sch, target=host, reference=plain, repeat=2)
    assert m.max_rel_error < 1e-5 and m.flops == w.flops
    with pytest.raises(ParityError):
        tvm_ext.measure(_wrong_matmul(24, 24, 24), target=host, reference=plain)
    with pytest.raises(ValueError, match="no reference to check parity against"):
        tvm_ext.measure(plain, target=host)


def test_flops_are_the_references_not_the_scheduled_functions(host):
    # TVM's estimate counts a split's predicate as work: 30^3 matmul split by 7 reads 63900
    # FLOPs scheduled, 54000 + 900 unscheduled. GFLOP/s and the machine model's healing
    # must rest on the algorithm's count (a layer norm candidate read 500x and "beat" the peak).
    n = 30
    A, B = te.placeholder((n, n), name="A"), te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    D = te.compute((n, n), lambda i, j: C[i, j] + 1.0, name="D")
    plain = te.create_prim_func([A, B, D])
    sch = tvm_api.Schedule(plain)
    i, j, _ = sch.get_loops(sch.get_sblock("C"))
    sch.split(j, [None, 7])
    assert tvm_api.estimated_flops(tvm_api.main_func(sch.mod)) > tvm_api.estimated_flops(plain)
    m = tvm_ext.measure(sch, target=host, reference=plain, repeat=2)
    assert m.flops == tvm_api.estimated_flops(plain) == 2 * n**3 + n * n


def test_mismatched_workload_and_bad_objects(host):
    with pytest.raises(ValueError, match=r"parameter 0 is \(8, 8\) float32"):
        tvm_ext.measure(K.matmul(8, 8, 8).func, K.matmul(4, 4, 4), host)
    with pytest.raises(TypeError, match="expected a tvm.s_tir.Schedule"):
        tvm_ext.measure("matmul", target=host)
    with pytest.raises(ValueError, match="repeat=0"):
        tvm_ext.measure(K.axpy(8).func, target=host, repeat=0)


def test_tolerances_per_dtype():
    ref = np.ones(4)
    check_parity([np.ones(4, np.float32) * (1 + 5e-5)], [ref], "fp32 ok")
    with pytest.raises(ParityError):
        check_parity([np.ones(4, np.float32) * (1 + 5e-4)], [ref], "fp32 bad")
    check_parity([np.ones(4, np.float16) * np.float16(1.001)], [ref], "fp16 ok")
    with pytest.raises(ParityError):
        check_parity([np.array([1, 2, 3], np.int32)], [np.array([1, 2, 4])], "int exact")
    with pytest.raises(ParityError):
        check_parity([np.array([np.nan], np.float32)], [np.array([1.0])], "nan")


def test_a_subnormal_flushed_to_zero_is_no_error_and_a_normal_one_still_is():
    """An output all of subnormals (a randomly initialized MobileViT's: ~7e-41) against the
    same values flushed to zero, or halved: no error; a normal value off by the same
    relative amount still fails."""
    ref = np.array([6.3e-40, 4.9e-41, -1e-39, 0.0], np.float32)
    for out in (np.zeros(4, np.float32), ref / 2):
        assert check_parity([out], [ref.astype(np.float64)], "flushed") == (0.0, 0.0)
    mixed = np.array([1.0, 1e-39], np.float32)
    assert check_parity([np.array([1.0, 0.0], np.float32)], [mixed], "mixed") == (0.0, 0.0)
    with pytest.raises(ParityError):
        check_parity([np.array([1.2e-38], np.float32)], [np.array([2.4e-38])], "smallest normal")
    with pytest.raises(ParityError):
        check_parity([np.array([1e-30], np.float32)], [np.array([2e-30])], "normal")


def test_a_nan_or_infinity_the_reference_has_at_the_same_place_is_no_error():
    special = np.array([1.0, np.nan, np.inf, -np.inf])
    assert check_parity([special.astype(np.float32)], [special], "same") == (0.0, 0.0)
    for out, ref in [([1.0, 2.0], [1.0, np.nan]), ([1.0, -np.inf], [1.0, np.inf]),
                     ([1.0, np.inf], [1.0, 5.0]), ([1.0, np.nan], [1.0, np.inf])]:  # fmt: skip
        with pytest.raises(ParityError, match="inf"):
            check_parity([np.array(out, np.float32)], [np.array(ref)], "differs")


def test_threads_context_sets_and_restores_the_pool():
    before = tvm_api.runtime_threads()
    with tvm_api.threads(1):
        assert tvm_api.runtime_threads() == 1
    assert tvm_api.runtime_threads() == before
    with pytest.raises(ThreadConfigError, match="thread pool runs"):
        with tvm_api.threads(4096):
            pass
    assert tvm_api.runtime_threads() == before


def test_a_models_task_is_timed_without_its_weight_repack(host, monkeypatch):
    """``weights_repacked_once`` (a model's task): parity on the whole function, repack
    included; the time on the function without its repacking block, its weight a parameter in
    the packed layout, as the compiled model runs it once the repack is folded."""
    from tvm import topi
    from tvm_ext.schedules.rules.dispatch import schedule_func

    X = te.placeholder((8, 64), name="X")
    W = te.placeholder((96, 64), name="W")
    func = te.create_prim_func([X, W, topi.nn.dense(X, W)]).with_attr("layout_free_buffers", [1])
    sch, rule = schedule_func(func, host)
    assert rule == "contraction"
    stripped = tvm_api.param_specs(tvm_api.main_func(tvm_api.without_weight_repack(sch.mod)))
    assert stripped[1] != ((96, 64), "float32") and stripped[0] == ((8, 64), "float32")
    built = []
    real_build = tvm_api.build

    def spy(mod, target):
        built.append(tvm_api.param_specs(tvm_api.main_func(mod)))
        return real_build(mod, target)

    monkeypatch.setattr(tvm_api, "build", spy)
    m = tvm_ext.measure(sch, target=host, reference=func, repeat=2, weights_repacked_once=True)
    assert m.max_rel_error < 1e-4
    # Built: the scheduled function (parity), the reference, then the timed one, repack left out.
    assert built[0][1] == ((96, 64), "float32") and built[-1] == stripped and len(built) == 3
    built.clear()
    tvm_ext.measure(sch, target=host, reference=func, repeat=2)  # a kernel: timed as built
    assert len(built) == 2 and all(b[1] == ((96, 64), "float32") for b in built)


def test_a_repeated_subexpression_is_not_measured_as_work(host):
    """TE writes ``fast_erf``'s clamped input at every use and TVM's estimate counts each
    copy (78 FLOPs an element of BERT's GELU for the 30 the built code runs): measured with
    that count, a GELU 'ran' past the compute roof, which heals the machine model upward on
    no evidence. measure counts each distinct subexpression once."""
    from tvm import te, topi

    from tvm_ext.base import op_count

    x = te.placeholder((64, 512), "float32", name="x")
    erf = topi.fast_erf(te.compute(x.shape, lambda i, j: x[i, j] * 0.70710677, name="scaled"))
    out = te.compute(x.shape, lambda i, j: x[i, j] * 0.5 * (1.0 + erf[i, j]), name="gelu")
    func = te.create_prim_func([x, out])
    points = 64 * 512
    # scaled 1, fast_erf 25 (see test_floor's repeated-subexpression test), gelu 3
    assert op_count.distinct_flops(func) == (1 + 25 + 3) * points
    assert tvm_api.estimated_flops(func) > 2 * op_count.distinct_flops(func)
    scheduled = tvm_ext.schedules.apply(tvm_api.as_module(func), host).mod
    m = tvm_ext.measure(scheduled, None, host, reference=func, repeat=3)
    assert m.flops == op_count.distinct_flops(func)
