"""The dot rule: a contraction whose long operand is contiguous along its reduction only (a
decode step's scores against its cache) reads that operand once, in place, the reduction
in vector partials; parity with the plain build at several lengths, and the shapes it leaves
to the contraction rule."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from rule_checks import check_rule
from test_symbolic_rules import symbolic_rule
from tvm import te
from tvm_ext.schedules.rules import dot

from tvm_ext import schedules as S


def _scores(length, heads: int, group: int, dim: int):
    """``einsum("kgd,nkd->kgn")``: ``group`` query rows a key head against ``length`` keys
    laid out sequence-major, as a decode step reads its cache."""
    Q = te.placeholder((heads, group, dim), name="Q")
    K = te.placeholder((length, heads, dim), name="K")
    d = te.reduce_axis((0, dim), "d")
    S_ = te.compute((heads, group, length),
                    lambda k, g, j: te.sum(Q[k, g, d] * K[j, k, d], axis=d), name="S")  # fmt: skip
    return Q, K, S_


def _blocks(text: str) -> list[str]:
    return sorted({part.split('"')[1] for part in text.split("T.sblock(")[1:]} - {"root"})


def test_decode_scores_read_a_symbolic_cache_once_in_place(host):
    """Grouped-query scores over a cache of symbolic length: no copy of the keys (only the
    partials and the output are written), the lanes vectorized, and parity at lengths from
    one key to several hundred."""
    n = tvm.tirx.Var("n", "int64")
    Q, K, S_ = _scores(n, 4, 3, 64)
    text = symbolic_rule(
        te.create_prim_func([Q, K, S_]),
        host,
        [1, 7, 64, 301],
        lambda rng, m: [
            rng.standard_normal((4, 3, 64)).astype("float32"),
            rng.standard_normal((m, 4, 64)).astype("float32"),
            np.zeros((4, 3, m), "float32"),
        ],
        rule="dot",
    )
    assert _blocks(text) == ["S", "S_rf_init", "S_rf_update"]
    assert "T.vectorized" in text and "T.parallel(n)" in text


def test_one_query_row_a_head_with_an_epilogue_is_a_dot(host):
    """A multi-head decode (one query row a head, a static cache) with a scaling epilogue."""
    Q, K, S_ = _scores(40, 2, 1, 32)
    out = te.compute(S_.shape, lambda *i: S_(*i) * 0.125, name="scaled")
    check_rule(te.create_prim_func([Q, K, out]), host, "dot")


@pytest.mark.parametrize(
    "why, shape",
    [
        ("a prefill's many query rows share a packed copy", (64, 2, 48, 32)),
        ("a reduction of no whole vectors", (64, 2, 3, 20)),
    ],
)
def test_shapes_the_contraction_rule_keeps(host, why, shape):
    length, heads, group, dim = shape
    Q, K, S_ = _scores(length, heads, group, dim)
    func = te.create_prim_func([Q, K, S_]).with_attr("global_symbol", "main")
    assert dot.schedule_func(func, host) is None, why
    assert S.rules.schedule_func(func, host)[1] == "contraction"


def test_a_weight_read_along_its_reduction_stays_with_the_contraction_rule(host):
    """A Linear's (out, in) weight is read along its reduction too, but is packed once at
    compile time: the contraction rule's place."""
    X = te.placeholder((1, 256), name="X")
    W = te.placeholder((96, 256), name="W")
    r = te.reduce_axis((0, 256), "r")
    Y = te.compute((1, 96), lambda i, j: te.sum(X[i, r] * W[j, r], axis=r), name="Y")
    func = te.create_prim_func([X, W, Y]).with_attr("layout_free_buffers", [1])
    assert dot.schedule_func(func, host) is None


def test_a_sum_of_squares_is_no_dot(host):
    """An RMSNorm's reduction reads one operand along its reduction too; it is no product
    of two operands, and stays with the rows rule."""
    X = te.placeholder((64, 512), name="X")
    r = te.reduce_axis((0, 512), "r")
    Y = te.compute((64,), lambda i: te.sum(X[i, r] * X[i, r], axis=r), name="Y")
    assert dot.schedule_func(te.create_prim_func([X, Y]), host) is None
