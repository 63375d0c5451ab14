"""The rules on extents off the vector width (ViT's 197 tokens, 1000 or 1025 classes, 33
channels): whole vectors and a remainder or a padded axis, never a per-lane predicate inside a
vectorized tile; each case checked against the plain build (``rule_checks.check_rule``)."""

from __future__ import annotations

import re

import pytest
from rule_checks import check_rule, script, user_matmul_bias_relu
from tvm import relax, te, topi

from tvm_ext import schedules as S
from tvm_ext.base import tvm_api
from tvm_ext.hardware.target import lanes_for


def test_an_extent_off_the_vector_width_is_padded_not_predicated(host):
    """ViT's 197 tokens: a tail inside the vectorized loop is a per-lane predicate and LLVM
    scalarizes the whole tile under it (a 12 x 197 x 197 x 64 batch matmul ran 27x slower
    than at 208). The rule pads the vector axis to whole vectors instead: the accumulating
    loop runs with no per-lane predicate (the rows' tail tile is guarded per row, one
    condition for a whole vector), the valid part is written back."""
    A = te.placeholder((2, 197, 8), name="A")
    B = te.placeholder((2, 197, 8), name="B")
    k = te.reduce_axis((0, 8), name="k")
    C = te.compute((2, 197, 197), lambda b, i, j: te.sum(A[b, i, k] * B[b, j, k], axis=k), name="C")
    text = script(check_rule(te.create_prim_func([A, B, C]), host, "contraction"))
    at = text.index('T.sblock("C_update")')
    lane = re.findall(r"for (\w+) in T\.vectorized", text[:at])[-1]
    update = text[at:]
    update = update[: update.index("with T.sblock", 1) if "with T.sblock" in update[1:] else None]
    # The rows are not padded: no per-call copy of A, which only the rows index.
    assert "C_pad" in text and "A_pad" not in text
    assert all(lane not in guard for guard in re.findall(r"T\.where\((.*)\)", update)), update


def _block_text(text: str, name: str) -> str:
    """The text of block ``name`` up to the next block."""
    start = text.index(f'T.sblock("{name}")')
    rest = text[start + 1 :]
    if "with T.sblock" not in rest:
        return text[start:]
    return text[start : start + 1 + rest.index("with T.sblock")]


# The plain statement of the 33rd lane, as TVMScript prints its loop (int64 or int32 bounds).
_SCALAR_LANE_33 = re.compile(r"T\.unroll\((?:T\.int64\()?32\)?, (?:T\.int64\()?33\)")


def test_a_conv_to_an_odd_channel_count_runs_whole_vectors_and_one_scalar_lane(host):
    """A 33-channel output ran in one 33-lane vector statement, which LLVM splits with
    hundreds of shuffles (470 us against 44 us at 48 channels); then padded to 48 channels
    on every call (18.4 us for 3x3, 33 -> 33 on 14 x 14). Its weight's panels are the 33
    channels, computed as whole vectors and one scalar lane, each run its own pass over the
    reduction: 13.0 us, no copy (Zen 5, ``bench/odd_extents.py``)."""
    from tvm_ext.workloads.legalized import legalized_func

    conv = legalized_func(
        lambda x, w: relax.op.nn.conv2d(x, w, padding=1, data_layout="NHWC", kernel_layout="OHWI"),
        [("x", (1, 6, 6, 33)), ("w", (33, 3, 3, 33))],
        free=(1,),
    )
    from tvm_ext.hardware.target import lanes_for

    text = script(check_rule(conv, host, "contraction", rtol=1e-4))
    lanes = lanes_for(host, 32)
    if lanes == 8:
        # AVX2: the panel is the whole axis (four 8-lane statements and a scalar), two rows
        # of it in the registers, too few for a pass per run: the statements side by side
        # in one pass over the reduction, no copy of the output and no predicate (padded to
        # 48 channels on every call before; a 3x3 33 -> 33 on 14 x 14 the same time either
        # way, a depthwise one 25 % faster, Zen 3).
        assert "T.int64(48)" not in text
        passes = text.split("T.grid(T.int64(3), T.int64(3), T.int64(33))")
        assert len(passes) == 2, text  # one reduction loop nest
        update = passes[1].split('sblock("conv2d_nhwc_global')[0]
        assert "T.vectorized(T.int64(8))" in update and _SCALAR_LANE_33.search(update)
        assert "T.where" not in update
        return
    assert "_pad" not in text and "T.where" not in text
    main, rest = text.split('_update"):')[:2]  # whole vectors, then the last lane
    assert f"T.vectorized(T.int64({lanes}))" in main.rsplit("for ", 1)[1]
    assert "T.vectorized" not in rest.rsplit("for ", 1)[1]  # one lane: a plain statement
    assert text.count('_update"):') == 2


@pytest.mark.parametrize("classes", [1025, 1000])
def test_a_weight_axis_a_wide_panel_divides_is_not_copied(host, classes):
    """A classifier head's weight of 1025 columns (no whole number of 8-lane statements) was
    padded to 1040 on every call, a pass over the whole weight: 318 us against 40 us padded
    once (1 x 1280 @ 1280 x n, Zen 5). 1025 = 25 x 41: it runs in panels of 41 columns,
    packed once, with no copy (33 us); 1000 in panels of 40."""
    from tvm_ext.workloads.legalized import legalized_func

    head = legalized_func(
        lambda x, w: relax.op.matmul(x, w), [("x", (1, 128)), ("w", (128, classes))], free=(1,)
    )
    text = script(check_rule(head, host, "contraction", rtol=1e-4))
    assert "_pad" not in text and "T.where" not in text
    assert "layout_rewrite_preproc" in text  # the panels packed once


def _update_statements(text: str) -> list[int]:
    """The lanes of each vector statement of a tile's reduction step: every vectorized loop
    of a block that reduces (its update, or the block itself where the tile keeps its init
    in the update), times the unrolled loop around it; a ``T.vectorized(a, b)`` loop has
    ``b - a`` lanes."""
    text = re.sub(r"T\.int64\((\d+)\)", r"\1", text)
    widths = []
    loop = re.compile(
        r"(?:T\.unroll\((\d+)\):\s*for \w+ in )?T\.vectorized\((\d+)(?:, (\d+))?\):"
        r"\s*with T\.sblock\(\"(\w+)\"\):(.*?)(?=\bfor \w+ in |with T\.sblock|\Z)",
        re.S,
    )
    for found in loop.finditer(text):
        unroll, first, last, name, body = found.groups()
        if name.endswith("_init") or "T.axis.reduce" not in body:
            continue
        lanes = int(last) - int(first) if last else int(first)
        widths += [lanes] * int(unroll or 1)
    return widths


@pytest.mark.parametrize("classes", [768, 1000])
def test_a_gemv_tile_keeps_several_fma_chains_in_flight(host, classes):
    """A matmul of one row (a classifier head, a decode step) has no rows to tile: its
    accumulators are its panel's statements alone. With the two-vector panel of a tile with
    rows, 1000 classes on AVX2 ran in one-vector panels of 8, one FMA chain (a 1 x 1280 @
    1280 x 1000 head 1.9x the time of 1008 classes' two, Zen 3). Now a panel of two to
    eight vectors that divides the axis: 768 in four or more statements on any target, 1000
    in five 8-lane ones on AVX2 (on AVX-512, no whole-vector divisor: 16 + 16 + 8)."""
    from tvm_ext.workloads.legalized import legalized_func

    head = legalized_func(
        lambda x, w: relax.op.matmul(x, w), [("x", (1, 256)), ("w", (256, classes))], free=(1,)
    )
    text = script(check_rule(head, host, "contraction", rtol=1e-4))
    widths = _update_statements(text)
    lanes = lanes_for(host, 32)
    least = 4 if classes % (4 * lanes) == 0 else (5 if lanes == 8 else 3)
    assert len(widths) >= least and sum(widths) >= least * 8, widths
    assert "T.where" not in text


def test_an_odd_activation_axis_is_padded_to_two_vector_panels_on_avx2(host):
    """An activation's odd vector axis is padded per call where no whole panel tiles it (65
    columns on AVX2). Padded to one vector (72), the tile took one-vector panels (8 rows x 8
    lanes): a 197 x 197 x 256 matmul padded to 200 ran 403 us against 139 padded to 208;
    12 x 197 x 197 x 64 with B transposed 1293 -> 552 us (Zen 3). Now to two-vector panels:
    80 columns. Structure for an AVX2 target (no run); parity on this host."""
    q, k = te.placeholder((2, 24, 64), name="Q"), te.placeholder((2, 65, 64), name="K")
    func = te.create_prim_func([q, k, topi.nn.batch_matmul(q, k, transpose_b=True)])
    check_rule(func, host, "contraction", rtol=1e-4)
    avx2 = tvm_api.Target({"kind": "llvm", "mcpu": "znver3", "num-cores": 2})
    sch, rule = S.rules.schedule_func(func, avx2)
    text = script(sch).replace("T.int64(", "(")
    assert rule == "contraction"
    assert "_pad_global = T.sblock_alloc_buffer((2, 24, 80))" in text
    assert _update_statements(text) == [8, 8]


def test_a_weight_axis_whose_panels_cost_more_statements_is_padded(host):
    """130 columns of a transposed B: its panels of 26 (16 + 8 + 2 lanes on AVX-512; 8 x 3 +
    2 on AVX2) take more vector statements a row than the padded axis (15 against 9), and
    the whole axis is too wide for a register tile: padded. (Panels of 25 against a padded
    50: 20.6 -> 17.3 us, 12 x 50 x 50 x 64, Zen 5.) 100 columns on AVX-512 run as one
    panel of six vectors and four lanes, two rows of accumulators and more (see
    test_an_axis_one_register_panel_holds_is_not_padded)."""
    q, k = te.placeholder((2, 20, 64), name="Q"), te.placeholder((2, 130, 64), name="K")
    func = te.create_prim_func([q, k, topi.nn.batch_matmul(q, k, transpose_b=True)])
    text = script(check_rule(func, host, "contraction", rtol=1e-4))
    assert "K_pad" in text


@pytest.mark.parametrize("columns", [50, 65, 49, 33])
def test_an_axis_one_register_panel_holds_is_not_padded(host, columns):
    """A vector axis of four or five vectors' worth that a register tile holds whole (50 =
    16 x 3 + 2, 65 = 16 x 4 + 1 on AVX-512) runs as one panel of whole vectors and a narrower
    rest, no more statements than padded, with no per-call copy of the operand and no
    predicated write-back: 12 x 50 x 50 x 64 attention scores 17.4 -> 11.0 us, a 65 x 65 x
    256 matmul 11.0 -> 7.5 us (its padded copy ran in a parallel stage of its own: 18 us
    while a neighbour used a core; Zen 5). On AVX2 (16 registers) the same axes are
    padded where a whole panel leaves fewer than two rows of accumulators; 33 columns (four
    vectors and a lane) run whole, two rows in one pass (see tile_shape.MIN_PASS_ROWS).

    The row tile is a divisor of at least four rows, else all the rows that fit and a tail
    (tile_shape._rows): a 33 x 33 x 256 matmul in tiles of 3 rows (a divisor) took 3.0 us,
    in tiles of 7 and a tail 2.2 us."""
    from tvm_ext.hardware.target import lanes_for

    q, k = te.placeholder((3, 24, 32), name="Q"), te.placeholder((3, columns, 32), name="K")
    func = te.create_prim_func([q, k, topi.nn.batch_matmul(q, k, transpose_b=True)])
    text = script(check_rule(func, host, "contraction", rtol=1e-4))
    mm = script(check_rule(user_matmul_bias_relu(24, columns, 32), host, "contraction"))
    if lanes_for(host, 32) < 16:
        if columns == 33:
            assert "_pad" not in text and "_pad" not in mm
            assert _SCALAR_LANE_33.search(mm)  # the last lane beside the vectors
        else:
            assert "K_pad" in text and "B_pad" in mm
        return
    for printed in (text, mm):
        assert "_pad" not in printed  # (a tail of rows is a scalar condition per row)
        assert "T.vectorized(T.int64(16))" in printed or "T.vectorized(16)" in printed
    rows = max(int(r) for r in re.findall(r"T\.unroll\((\d+)\)", mm))
    assert rows >= (4 if columns == 33 else 3)  # 24 rows: 6, not 3


def test_a_padded_write_back_is_a_vectorized_pass_of_its_own(host):
    """Attention scores over 190 tokens, padded to whole vectors: the slice back to 190
    columns, inlined into the tile's write-back, put a per-lane condition on every panel's
    stores and LLVM scalarized them all (ViT's 12 x 197 x 197 x 64: 247 us against 157 us at
    208). The tile writes its padded panels whole; one pass copies the valid columns in
    whole vectors and a remainder (204 us, Zen 5)."""
    q, k = te.placeholder((4, 190, 32), name="Q"), te.placeholder((4, 190, 32), name="K")
    func = te.create_prim_func([q, k, topi.nn.batch_matmul(q, k, transpose_b=True)])
    text = script(check_rule(func, host, "contraction", rtol=1e-4))
    write_back = _block_text(text, "T_batch_matmul_NT_pad_global")
    assert "T.where" not in write_back
    assert "T_batch_matmul_NT_pad_ax20" in text  # the slice: whole vectors, then the rest


def test_rows_that_a_small_tile_divides_are_not_copied(host):
    """65 rows: a 5-row tile divides them, so only the columns (eight vectors and a lane, no
    panel tiles them) are padded; A is read where it is instead of copied into 72 padded
    rows on every call."""
    from tvm_ext.hardware.target import lanes_for

    columns = 8 * lanes_for(host, 32) + 1
    text = script(check_rule(user_matmul_bias_relu(65, columns, 32), host, "contraction"))
    assert "B_pad" in text and "A_pad" not in text


def test_an_odd_innermost_extent_runs_whole_vectors_and_a_remainder(host):
    """An element-wise loop of 65 split by the lanes put a per-lane predicate in every vector
    (LLVM scalarizes it); the loop is cut into whole vectors and a plain remainder. The same
    for a padding copy whose condition changes inside a vector (B_pad: columns < 129 on 16
    lanes, where no panel tiles them)."""
    from tvm_ext.hardware.target import lanes_for

    lanes = lanes_for(host, 32)
    A = te.placeholder((300, 4 * lanes + 1), name="A")
    relu = te.compute(A.shape, lambda i, j: te.max(A[i, j], 0.0), name="relu")
    text = script(check_rule(te.create_prim_func([A, relu]), host, "injective"))
    assert "T.where" not in text and f"T.vectorized({lanes})" in text
    text = script(check_rule(user_matmul_bias_relu(4, 8 * lanes + 1, 32), host, "contraction"))
    pattern = rf'T\.vectorized\({lanes}\):\s*with T\.sblock\("B_pad_ax10"\)'
    assert re.search(pattern, text)  # whole vectors of B's padded copy: columns 0-127
    assert "T.vectorized" not in _block_text(text, "B_pad_ax11")  # column 128 on, plain
