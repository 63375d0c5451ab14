"""Symbolic lengths in the rules: symbolic extents scheduled without a per-row or per-lane
predicate in the accumulating loop (rows and vector axes padded to whole tiles, a range's row
tile, a softmax's element-wise stages as plain loops), parity at lengths inside and around a
tile; and the lowering that keeps a lone symbolic reshape a view."""

from __future__ import annotations

import re

import numpy as np
import pytest
import tvm
from rule_checks import run_built
from tvm import te

from tvm_ext import schedules as S
from tvm_ext.base import tvm_api


def symbolic_rule(func, target, lengths, make_args, rule: str = "contraction"):
    """Schedule ``func`` (symbolic in ``n``) with the rules, ``rule`` taking it; build it
    once and compare it with the plain build at each of ``lengths``. Returns the scheduled
    script."""
    func = func.with_attr("global_symbol", "main")
    sch, took = S.rules.schedule_func(func, target)
    assert took == rule
    rng = np.random.default_rng(0)
    for n in lengths:
        args = make_args(rng, n)
        want = run_built(tvm_api.IRModule({"main": func}), [a.copy() for a in args], target)
        got = run_built(sch.mod, [a.copy() for a in args], target)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    return sch.mod.script()


def _update_block(text: str, name: str) -> str:
    """The text of block ``name`` up to the next block."""
    body = text[text.index(f'T.sblock("{name}")') :]
    return body[: body.index("with T.sblock", 1)] if "with T.sblock" in body[1:] else body


def test_symbolic_rows_are_padded_to_whole_row_tiles(host):
    """A matmul over a sequence of symbolic length: a row tail would make the accumulator
    tile's extent symbolic (allocated at the output's size, not in registers; 3.5x slower on
    Zen 4), so the rows are padded to ceil(n / mr) * mr and the accumulating loop runs
    unpredicated, at every length (1 row, fewer than a tile, a tile and a tail). The padded
    rows read the last valid row of X (``X[min(i, n - 1), r]``, discarded at the write-back)
    where X lies: no per-call padded copy of X and no condition on its loads."""
    n = tvm.tirx.Var("n", "int32")
    X = te.placeholder((n, 24), name="X")
    W = te.placeholder((24, 48), name="W")
    r = te.reduce_axis((0, 24), "r")
    Y = te.compute((n, 48), lambda i, j: te.sum(X[i, r] * W[r, j], axis=r), name="Y")
    Z = te.compute((n, 48), lambda i, j: te.max(Y[i, j], 0.0), name="Z")
    text = symbolic_rule(
        te.create_prim_func([X, W, Z]),
        host,
        [1, 5, 16, 37],
        lambda rng, m: [
            rng.standard_normal((m, 24)).astype("float32"),
            rng.standard_normal((24, 48)).astype("float32"),
            np.zeros((m, 48), "float32"),
        ],
    )
    update = _update_block(text, "Y_update")
    assert "T.where" not in update and "if_then_else" not in update
    assert "X_pad" not in text and "Y_pad" in text
    assert re.search(r"X\[T\.min\(v\w+, n - 1\), v\w+\]", update), update


def test_a_symbolic_vector_axis_is_padded_to_whole_panels(host):
    """Attention scores over a symbolic length: both the rows and the vector axis are the
    length; a lane tail is a per-lane predicate LLVM scalarizes the tile under, so the vector
    axis is padded too. The keys (B transposed) are padded
    and packed in one pass, not padded then packed (8 % of a 12-head kernel at 128 tokens)."""
    n = tvm.tirx.Var("n", "int32")
    Q = te.placeholder((2, n, 8), name="Q")
    K = te.placeholder((2, n, 8), name="K")
    r = te.reduce_axis((0, 8), "r")
    S_ = te.compute((2, n, n), lambda b, i, j: te.sum(Q[b, i, r] * K[b, j, r], axis=r), name="S")
    text = symbolic_rule(
        te.create_prim_func([Q, K, S_]),
        host,
        [2, 17, 40],
        lambda rng, m: [
            rng.standard_normal((2, m, 8)).astype("float32"),
            rng.standard_normal((2, m, 8)).astype("float32"),
            np.zeros((2, m, m), "float32"),
        ],
    )
    assert "T.where" not in _update_block(text, "S_update")
    keys = [b for b in re.findall(r'T\.sblock\("(\w+)"\)', text) if b.startswith("K")]
    assert keys == ["K_pad_global"], keys
    # P V: the reduction is the symbolic length, and the rows.
    V = te.placeholder((2, n, 16), name="V")
    P = te.placeholder((2, n, n), name="P")
    k = te.reduce_axis((0, n), "k")
    Out = te.compute((2, n, 16), lambda b, i, j: te.sum(P[b, i, k] * V[b, k, j], axis=k), name="O")
    text = symbolic_rule(
        te.create_prim_func([P, V, Out]),
        host,
        [3, 20],
        lambda rng, m: [
            rng.standard_normal((2, m, m)).astype("float32"),
            rng.standard_normal((2, m, 16)).astype("float32"),
            np.zeros((2, m, 16), "float32"),
        ],
    )
    update = _update_block(text, "O_update")
    assert "T.where" not in update and "if_then_else" not in update
    # Only P's rows are padded: P is read where it lies, its padded rows clamped to the last.
    assert "P_pad" not in text and re.search(r"P\[v\w+, T\.min\(v\w+, n - 1\), v\w+\]", update)


def test_a_padded_row_tile_never_writes_past_its_output(host):
    """Symbolic rows padded to the row tile, and a weight's 172 columns ending in a partial
    panel: the write-back needs both guards, which TVM 0.27 cannot keep on one block (it
    kept one and wrote past the output: Llama's MLP corrupted the heap). The output is a
    view into a larger buffer whose tail must come back untouched."""
    n = tvm.tirx.Var("n", "int64")
    X = te.placeholder((n, 64), name="X")
    W = te.placeholder((64, 172), name="W")
    r = te.reduce_axis((0, 64), "r")
    Y = te.compute((n, 172), lambda i, j: te.sum(X[i, r] * W[r, j], axis=r), name="Y")
    func = te.create_prim_func([X, W, Y]).with_attr("global_symbol", "main")
    func = func.with_attr("layout_free_buffers", [1])  # W is a weight, as in a model
    sch, took = S.rules.schedule_func(func, host)
    assert took == "contraction" and "Y_pad" in sch.mod.script()
    lib = tvm.tirx.build(sch.mod, target=host)
    rng = np.random.default_rng(0)
    for m in (5, 16, 37):
        x = rng.standard_normal((m, 64)).astype("float32")
        w = rng.standard_normal((64, 172)).astype("float32")
        whole = tvm.runtime.tensor(np.full((m + 8, 172), 7.0, "float32"))
        lib(tvm.runtime.tensor(x), tvm.runtime.tensor(w), whole._create_view((m, 172)))
        out = whole.numpy()
        np.testing.assert_allclose(out[:m], x @ w, rtol=1e-4, atol=1e-4)
        assert (out[m:] == 7.0).all(), f"n={m}: wrote past the output"


def test_a_softmax_over_symbolic_rows_and_columns_is_a_rows_schedule(host):
    """12 heads x n rows x n columns (attention scores at any length): the rows rule takes it,
    each row's stages computed in the row, the heads in parallel (fused with the rows, the
    bindings divided by ``n`` and ``parallel`` refused: it fell to the staged rule, 9x the
    time at a static 384); parity at fewer columns than lanes, one vector, and more."""
    func = _heads_softmax()
    sch, took = S.rules.schedule_func(func, host)
    assert took == "rows"
    text = sch.mod.script()
    assert "T.parallel(12)" in text
    _check_heads_softmax(func, sch, (5, 16, 37), host)


def test_a_symbolic_softmax_known_to_fill_its_lanes_reduces_in_lanes(host):
    """Declared at least 65 columns (a range past the short ones), the max and the sum run
    as the target's lanes of independent partials (under a tail predicate, rows merged level
    by level), not one chain of ``n`` dependent steps; without the bound they stay chains
    (a lane no column reaches would never be initialized)."""
    func = _heads_softmax()
    plain, _ = S.rules.schedule_func(func, host)
    assert "_rf" not in plain.mod.script()
    bounded = func.with_attr("tir_var_lower_bound", {"n": 65})
    sch, took = S.rules.schedule_func(bounded, host)
    assert took == "rows" and sch.mod.script().count("_rf") >= 2
    _check_heads_softmax(func, sch, (65, 77, 130), host)


@pytest.mark.parametrize("least", [None, 65])
def test_a_symbolic_softmax_keeps_no_lane_predicate_in_its_elementwise_stages(host, least):
    """The softmax's ``exp`` and its division over a symbolic row stay plain loops (LLVM
    vectorizes them with a remainder): split by the lanes, the tail's predicate sits inside
    the vectorized loop and TVM emits every lane as a scalar statement (at 384 columns the
    whole softmax ran 3.4x the static one's time; plain, 1.4x)."""
    func = _heads_softmax()
    if least is not None:
        func = func.with_attr("tir_var_lower_bound", {"n": least})
    sch, took = S.rules.schedule_func(func, host)
    assert took == "rows"
    for name in ("T_fast_exp", "T_softmax_norm"):
        assert not _predicated_in_vector_loop(sch.mod["main"], name), name
    _check_heads_softmax(func, sch, (5, 66) if least is None else (least, 100), host)


def _predicated_in_vector_loop(func, name: str) -> bool:
    """Whether block ``name`` has a predicate and a vectorized loop around it."""
    found = []

    def visit(node, vectorized):
        if isinstance(node, tvm.tirx.For):
            vectorized = vectorized or node.kind == tvm.tirx.ForKind.VECTORIZED
        if isinstance(node, tvm.s_tir.SBlockRealize) and node.block.name_hint == name:
            found.append(vectorized and not tvm_api.same_structure(node.predicate, True))
        for child in _children(node):
            visit(child, vectorized)

    visit(func.body, False)
    assert found, f"no block {name}"
    return any(found)


def _children(node):
    if isinstance(node, tvm.tirx.SeqStmt):
        return list(node.seq)
    if isinstance(node, tvm.s_tir.SBlockRealize):
        return [node.block]
    body = getattr(node, "body", None)
    return [body] if body is not None else []


def test_a_symbolic_row_range_takes_the_row_tile_that_runs_it_fastest():
    """A row extent declared at most 16 (a short length's schedule) takes the row tile that
    runs every length of the range in the least time, not as many rows as fit: 5 fit a
    tile of three vectors, whose 20 rows computed at 16 made BERT's 768 x 3072 matmul 1.27x
    the static tile's time; 4 rows compute 16. Rows already padded to whole tiles keep the
    tile that divides them; an unbounded extent keeps as many as fit."""
    from tvm_ext.schedules.common import assumed_bounds
    from tvm_ext.schedules.rules.tile_shape import symbolic_rows

    n = tvm.tirx.Var("n", "int64")
    with assumed_bounds({"n": 16}, {}):
        assert symbolic_rows(n, 5, 3) == 4
        assert symbolic_rows(n, 7, 2) == 4
        assert symbolic_rows(n, 8, 1) == 8  # one vector a row: 8 rows are 8 FMA chains
    assert symbolic_rows((n + 4) // 5 * 5, 5, 3) == 5
    assert symbolic_rows(n, 5, 3) == 5
    with assumed_bounds({"n": 512}, {"n": 65}):
        assert symbolic_rows(n, 7, 2) in (6, 7)
    with assumed_bounds({"n": 1 << 40}, {"n": 65}):  # a range far too long to walk
        assert symbolic_rows(n, 7, 2) == 7


def _heads_softmax():
    """Softmax over the last axis of 12 x n x n scores, ``n`` symbolic (TOPI's fast one)."""
    from tvm import topi

    n = tvm.tirx.Var("n", "int64")
    x = te.placeholder((12, n, n), "float32", "x")
    func = te.create_prim_func([x, topi.nn.fast_softmax(x, axis=-1)])
    return func.with_attr("global_symbol", "main")


def _check_heads_softmax(func, sch, lengths, host):
    """The scheduled softmax against the plain build at each of ``lengths``."""
    rng = np.random.default_rng(0)
    for length in lengths:
        args = [rng.standard_normal((12, length, length)).astype(np.float32),
                np.zeros((12, length, length), np.float32)]  # fmt: skip
        want = run_built(tvm_api.IRModule({"main": func}), [a.copy() for a in args], host)
        got = run_built(sch.mod, [a.copy() for a in args], host)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("axes", [(0, 1, 3, 2), (0, 2, 1, 3)])
def test_grouped_query_keys_over_a_symbolic_length_take_one_kernel_and_a_view(host, axes):
    """Grouped-query attention's ``repeat_kv`` (expand and broadcast 2 key heads to 6, a
    reshape merging them) then the keys' transpose, over a cache of symbolic length. The
    transpose moves only axes the reshape keeps whole, so it goes first, and the expand,
    broadcast and transpose are one kernel (Llama's decode step ran them as two, the repeated
    keys written and read once more between; 14.6 -> 12.8 ms at 1024 cached tokens); a
    transpose that moves a merged axis (heads and length swapped) stays where it is. Either
    way the reshape, never fused (its indices divide by the length, which
    ``AnnotateTIROpPattern`` calls opaque), is a view: left to ``relax.build``, the rules had
    already scheduled it into a loop nest it no longer recognized, and every call copied the
    keys (18.0 ms against 14.6 as a view)."""
    from tvm.script import relax as R
    from tvm.script import tirx as T

    from tvm_ext.model_pipeline.compile import lower

    @tvm.script.ir_module
    class RepeatKV:
        @R.function
        def main(k: R.Tensor((1, 2, "n", 8), "float32")):
            n = T.int64()
            with R.dataflow():
                e = R.expand_dims(k, axis=2)
                b = R.broadcast_to(e, R.shape([1, 2, 3, n, 8]))
                r = R.reshape(b, R.shape([1, 6, n, 8]))
                t = R.permute_dims(r, axes=list(axes))
                y = R.add(t, t)  # as in a model, something reads the keys (an output is
                R.output(y)  # never made a view)
            return y

    lowered = lower(RepeatKV, host, "main")
    assert "R.reshape(" in lowered["main"].script()
    kernels = [gv.name_hint for gv in lowered.get_global_vars() if gv.name_hint != "main"]
    assert not any("reshape" in k for k in kernels), kernels
    one = any("broadcast_to" in k and "transpose" in k for k in kernels)
    assert one == (axes == (0, 1, 3, 2)), kernels
    ex = tvm_api.relax.build(lowered, target=host)
    vm = tvm_api.relax.VirtualMachine(ex, tvm.cpu())
    k = np.random.default_rng(0).standard_normal((1, 2, 5, 8)).astype("float32")
    want = np.repeat(k, 3, axis=1).transpose(*axes) * 2
    np.testing.assert_allclose(vm["main"](tvm.runtime.tensor(k)).numpy(), want, rtol=1e-6)


def test_symbolic_rows_pad_to_the_tile_static_rows_take(host):
    """A matmul with one long reduction over symbolic rows is padded to the row tile the same
    matmul takes at a static length (past the stack where the registers hold it: 8 x 48 on
    AVX-512), not to a smaller tile that pads fewer rows, while the declared lengths fit one
    such tile: with the weight streamed from memory, as in a model, padded rows are nearly
    free and the bigger tile pays (BERT's symbolic model at 13 tokens 1.25 -> 1.10x its
    static one, Zen 4)."""
    tile = _static_row_tile(host)
    text = symbolic_rule(
        _weight_matmul(tvm.tirx.Var("n", "int32")).with_attrs({"tir_var_upper_bound": {"n": tile}}),
        host,
        [1, 3, tile],
        _weight_matmul_args,
    )
    padded = re.search(r"\(n \+ (\d+)\) // (\d+) \* (\d+)", text)
    assert padded and int(padded.group(2)) == tile, (tile, padded and padded.group(0))


def test_a_range_of_lengths_past_one_tile_pads_to_its_least_cost_tile(host):
    """Past one tile, the padded rows cost their FMAs: rows declared within 13 to 14 (a short
    range of length_dispatch) are padded to a tile that divides 14 where one of the
    candidates (half the static tile up to it) does: 7 x 48 on AVX-512, not 16 rows of 8-row
    tiles (BERT's symbolic model at 9 / 17 / 33 tokens 1.33 / 1.23 / 1.13x its static build
    with every length up to 64 in 8-row tiles, Zen 4); parity at both lengths."""
    tile = _static_row_tile(host)
    bounds = {"tir_var_lower_bound": {"n": 13}, "tir_var_upper_bound": {"n": 14}}
    text = symbolic_rule(
        _weight_matmul(tvm.tirx.Var("n", "int32")).with_attrs(bounds),
        host,
        [13, 14],
        _weight_matmul_args,
    )
    step = int(re.search(r"\(n \+ (\d+)\) // (\d+) \* \2", text).group(2))
    dividing = [c for c in range(tile, -(-tile // 2) - 1, -1) if 14 % c == 0]
    if dividing:
        assert step == dividing[0], (step, tile)
    assert -(-14 // step) * step <= -(-14 // tile) * tile, (step, tile)


def _weight_matmul(rows):
    X = te.placeholder((rows, 512), name="X")
    W = te.placeholder((512, 96), name="W")
    r = te.reduce_axis((0, 512), "r")
    Y = te.compute((rows, 96), lambda i, j: te.sum(X[i, r] * W[r, j], axis=r), name="Y")
    func = te.create_prim_func([X, W, Y]).with_attr("layout_free_buffers", [1])
    return func.with_attr("global_symbol", "main")


def _weight_matmul_args(rng, m):
    return [
        rng.standard_normal((m, 512)).astype("float32"),
        rng.standard_normal((512, 96)).astype("float32"),
        np.zeros((m, 96), "float32"),
    ]


def _static_row_tile(host) -> int:
    """The row tile the rules give :func:`_weight_matmul` at 64 static rows."""
    static, took = S.rules.schedule_func(_weight_matmul(64), host)
    assert took == "contraction"
    return int(re.search(r"T\.unroll\((?:T\.int\d+\()?(\d+)", static.mod.script()).group(1))


def test_a_short_symbolic_vector_axis_pads_to_one_vector(host):
    """Attention scores over a symbolic length the declared bounds keep within one vector (the
    short range ``length_dispatch`` schedules apart): the keys' axis is padded to one vector,
    not to the two-vector panel a longer length takes (half of every such panel was padding:
    the scores at 16 tokens ran at 2.9x the static kernel), and the parity holds at 1 to 16."""
    n = tvm.tirx.Var("n", "int32")
    lanes = S.common.lanes_for(host, 32)
    Q = te.placeholder((2, n, 64), name="Q")
    K = te.placeholder((2, n, 64), name="K")
    r = te.reduce_axis((0, 64), "r")
    S_ = te.compute((2, n, n), lambda b, i, j: te.sum(Q[b, i, r] * K[b, j, r], axis=r), name="S")
    func = te.create_prim_func([Q, K, S_])
    text = symbolic_rule(
        func.with_attrs({"tir_var_upper_bound": {"n": lanes}}),
        host,
        [1, 5, lanes],
        lambda rng, m: [
            rng.standard_normal((2, m, 64)).astype("float32"),
            rng.standard_normal((2, m, 64)).astype("float32"),
            np.zeros((2, m, m), "float32"),
        ],
    )
    steps = {int(m) for m in re.findall(r"\(n \+ \d+\) // (\d+) \* \1", text)}
    assert lanes in steps and 2 * lanes not in steps, steps
    assert "T.where" not in _update_block(text, "S_update")
    longer = S.rules.schedule_func(func.with_attr("global_symbol", "main"), host)[0]
    assert f"(n + {2 * lanes - 1}) // {2 * lanes}" in longer.mod.script()  # no bound: two
