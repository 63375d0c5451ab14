"""The IR rules: which rule takes a function, from its IR alone, and the schedule is correct.

Every case is checked against the unscheduled build of the same function on random inputs.
"""

from __future__ import annotations

import re
import types

import numpy as np
import pytest
import tvm
from rule_checks import check_rule, script, user_matmul_bias_relu
from tvm import relax, te
from tvm.relax.frontend import nn

from tvm_ext import schedules as S
from tvm_ext.base import tvm_api
from tvm_ext.base.errors import ScheduleNotApplicable
from tvm_ext.hardware.target import lanes_for


def _fused_primfuncs(module: nn.Module, shape):
    mod, _ = module.export_tvm({"forward": {"x": nn.spec.Tensor(shape, "float32")}})
    mod = relax.get_pipeline("zero")(mod)
    return {gv.name_hint: f for gv, f in mod.functions.items() if isinstance(f, tvm_api.PrimFunc)}


class _Rows(nn.Module):
    def __init__(self):
        self.norm = nn.LayerNorm(64)

    def forward(self, x):
        return nn.softmax(self.norm(x), axis=-1)


def test_softmax_and_layernorm_as_fuseops_gives_them_are_rows(host):
    funcs = _fused_primfuncs(_Rows(), (4, 16, 64))
    for name in ("layer_norm", "softmax"):
        sch = check_rule(funcs[name], host, "rows")
        text = script(sch)
        assert "_rf" in text and "T.vectorized" in text  # vector partial sums, folded


def test_injective_functions_and_rule_order(host):
    """Where two rules could take a function, the earlier one in ``CPU_RULES`` does: the
    fallback takes a transpose too and the contraction rule a depthwise convolution too, but
    ``injective`` and ``window`` come first."""
    from tvm_ext.schedules.rules import contraction, fallback

    from tvm_ext.workloads.legalized import legalized_func

    X = te.placeholder((32, 48), name="X")
    Y = te.compute((48, 32), lambda i, j: X[j, i] * 2.0, name="Y")
    transpose = te.create_prim_func([X, Y]).with_attr("global_symbol", "main")
    assert fallback.schedule_func(transpose, host) is not None
    check_rule(transpose, host, "injective")

    def depthwise(x, w):
        return relax.op.nn.conv2d(x, w, padding=1, groups=32, data_layout="NHWC",
                                  kernel_layout="OHWI")  # fmt: skip

    conv = legalized_func(depthwise, [("x", (1, 9, 9, 32)), ("w", (32, 3, 3, 1))], free=(1,))
    assert contraction.schedule_func(conv.with_attr("global_symbol", "main"), host) is not None
    check_rule(conv, host, "window", rtol=1e-4)
    names = [rule.NAME for rule in S.rules.CPU_RULES]
    assert names.index("injective") < names.index("fallback")
    assert names.index("window") < names.index("contraction")


def test_apply_covers_every_function_of_a_model(host):
    class Block(nn.Module):
        def __init__(self):
            self.fc1, self.fc2, self.norm = nn.Linear(64, 128), nn.Linear(128, 64), nn.LayerNorm(64)

        def forward(self, x):
            return self.norm(x + self.fc2(nn.gelu(self.fc1(x))))

    mod, _ = Block().export_tvm({"forward": {"x": nn.spec.Tensor((8, 64), "float32")}})
    applied = S.apply(relax.get_pipeline("zero")(mod), host)
    table = applied.table()
    assert set(table["rule"]) <= {"contraction", "rows", "injective"}
    assert table["share"].sum() == pytest.approx(1.0)
    assert applied.share_by_rule()["contraction"] > 0.9
    for gv, func in applied.mod.functions.items():  # every PrimFunc was replaced by a schedule
        if isinstance(func, tvm_api.PrimFunc):
            assert "T.parallel" in func.script() or "T.vectorized" in func.script(), gv


def test_schedule_takes_a_primfunc_module_or_schedule(host):
    func = user_matmul_bias_relu(16, 16, 16)
    for obj in (func, tvm_api.IRModule({"main": func}), tvm_api.Schedule(func)):
        assert isinstance(S.schedule(obj, host), tvm_api.Schedule)
    with pytest.raises(ValueError, match="suite workloads only"):
        S.schedule(func, host, mr=4)
    with pytest.raises(TypeError, match="PrimFunc"):
        S.schedule("matmul", host)
    # A GPU target gets the GPU rules (TVM's dlight behind the same interface).
    _, rule = S.rules.schedule_func(func, tvm_api.Target({"kind": "cuda", "arch": "sm_90"}))
    assert rule.startswith("dlight.")
    with pytest.raises(ScheduleNotApplicable, match="no IR rules for c targets"):
        S.schedule(func, tvm_api.Target({"kind": "c"}))


def test_attention_as_one_function_is_staged(host):
    from tvm_ext import models
    from tvm_ext.model_pipeline.compile import lower

    model = models.build("decoder", "small", batch=1)
    weights = list(model.mod["forward"].params)[len(model.inputs) :]
    bound = relax.transform.BindParams(
        "forward", {v: tvm.runtime.tensor(np.asarray(w)) for v, w in zip(weights, model.params)}
    )(model.mod)
    lowered = lower(bound, host, "forward")
    (name,) = [gv.name_hint for gv in lowered.functions if "attention" in gv.name_hint]
    sch = check_rule(lowered[name], host, "staged", rtol=1e-4)
    # Q K^T and P V are register-tiled stages, not recomputed inside a row loop.
    assert script(sch).count("_global") >= 2 and "T_batch_matmul_NT_update" in script(sch)


def test_a_row_off_the_vector_width_vectorizes_its_element_wise_stages(host):
    """A 50-column softmax ran its exp and division in 2-lane vectors (the widest power of two
    dividing 50); they now run in whole vectors of the target's lanes and a remainder."""
    from tvm_ext.workloads.legalized import legalized_func

    lanes = lanes_for(host, 32)
    softmax = legalized_func(lambda x: relax.op.nn.softmax(x, axis=-1), [("x", (3, 50, 50))])
    text = script(check_rule(softmax, host, "rows"))
    # (its exp is a libm call: a plain loop, see the test below)
    pattern = rf'T\.vectorized\(T\.int64\({lanes}\)\):\s*with T\.sblock\("T_softmax_norm_ax20"\)'
    assert re.search(pattern, text)


def _vectorized(sch, name: str) -> bool:
    loops = sch.get_loops(sch.get_sblock(name))
    return any(sch.get(loop).kind == tvm.tirx.ForKind.VECTORIZED for loop in loops)


@pytest.mark.parametrize("cols", [50, 64, 197])
def test_a_stage_calling_libm_runs_as_a_plain_loop(host, cols):
    """LLVM has no vector exp: vectorized, each lane became a call with the vector spilled
    around it (a user's TE sigmoid over 64 x 1000 ran 195 us vectorized, 121 us as plain
    calls as unscheduled; a 12 x 197 x 197 softmax 854 -> 636 us; Xeon, 2 threads). Stages
    without such a call keep their vectors."""
    from tvm_ext.workloads.legalized import legalized_func

    x = te.placeholder((16, cols), name="x")
    z = te.compute(x.shape, lambda i, j: x[i, j] / (1.0 + te.exp(-x[i, j])), name="z")
    assert not _vectorized(check_rule(te.create_prim_func([x, z]), host, "injective"), "z")
    softmax = legalized_func(lambda x: relax.op.nn.softmax(x, axis=-1), [("x", (3, cols, cols))])
    sch = check_rule(softmax, host, "rows")
    text = script(sch)
    exps = {n for n in re.findall(r'sblock\("(T_softmax_exp[^"]*)"\)', text) if "sum" not in n}
    assert exps and not any(_vectorized(sch, name) for name in exps)
    assert _vectorized(sch, "T_softmax_expsum_rf") or cols % 2  # the sum keeps its lanes


@pytest.mark.parametrize("combine", ["max", "sum"])
def test_an_odd_reduction_runs_as_independent_lanes(host, combine):
    """A row reduction over 197 columns (no vector divides it) ran as one chain of 197
    dependent scalar steps: a 12 x 197 x 197 softmax at 1.35x the time of 208 columns. It
    is split by the lanes under a tail predicate and ``rfactor``-ed into as many independent
    partials (1.05x, Zen 5). Its stages share one row loop by ``merge``: ``compute_at``
    dropped the partial's tail predicate (TVM 0.27), reading past the row. A centring by
    the row's max (not shift-invariant as a softmax is) and a normalization by its sum
    check that the tail is neither read past nor lost."""
    x = te.placeholder((6, 197), name="x")
    k = te.reduce_axis((0, 197), name="k")
    if combine == "max":
        r = te.compute((6,), lambda i: te.max(x[i, k], axis=k), name="r")
        out = te.compute((6, 197), lambda i, j: x[i, j] - r[i], name="out")
    else:
        r = te.compute((6,), lambda i: te.sum(x[i, k], axis=k), name="r")
        out = te.compute((6, 197), lambda i, j: x[i, j] / r[i], name="out")
    text = script(check_rule(te.create_prim_func([x, out]), host, "rows", rtol=1e-4))
    assert '"r_rf"' in text and text.count("T.where") == 1  # the partial's tail alone


def test_a_rule_failing_inside_tvm_hands_the_function_to_the_next(host, caplog):
    """A rule whose primitive trips one of TVM's internal checks (an InternalError, not a
    ScheduleError: it happened inlining a broadcasting epilogue) gives the function up with
    a warning naming it; the next rule takes it, instead of the whole compile failing."""

    def crash(func, target):
        raise tvm_api.InternalError("Check failed: (node.defined()) is false")

    broken = types.SimpleNamespace(NAME="broken", schedule_func=crash)
    func = user_matmul_bias_relu(16, 16, 16).with_attr("global_symbol", "main")
    with caplog.at_level("WARNING"):
        _, took = S.rules.schedule_func(func, host, rules=(broken, S.rules.contraction))
    assert took == "contraction"
    assert "rule broken gave up on main" in caplog.text


def test_a_row_of_one_vector_folds_no_partials(host):
    """A 16-column row split into 16 lane partials folded nothing: its 16 partials were
    reduced one by one after a store and a load (a 64 x 16 layer norm 0.95 -> 0.77 us, a
    12 x 16 x 16 softmax 13.9 -> 12.7 us; Xeon). Two vectors or more keep their partials."""
    from tvm_ext.workloads.legalized import legalized_func

    lanes = lanes_for(host, 32)
    for cols, partials in ((lanes, False), (2 * lanes, True)):
        norm = legalized_func(
            lambda x, g, b: relax.op.nn.layer_norm(x, g, b, axes=[-1]),
            [("x", (64, cols)), ("g", (cols,)), ("b", (cols,))],
        )
        assert ("_rf" in script(check_rule(norm, host, "rows"))) == partials, cols
