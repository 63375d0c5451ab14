"""The evidence for the bound's three facts about what LLVM does to a loop nest, on the LLVM this
TVM carries, for every x86 CPU family the tables name (each kernel is compiled, never run: a
build for another CPU works here):

- ``cost.walk.AUTO_VECTOR_INNER_LIMIT``: LLVM vectorizes a loop that is not innermost only
  after fully unrolling what is inside it, and it unrolls no inner nest of more iterations
  than this. The bound counts such a loop as vectorizable (full width) up to the limit; were
  LLVM to vectorize one beyond it, a candidate priced at one lane could beat its bound.
- ``cost.walk.UNROLL_REACH``: no inner nest of more iterations than this becomes one
  straight-line body (the bound lets the compiler reorder and share loads inside the body).
- ``cost.roofline.MAX_LOCKSTEP``: the copies of a loop body LLVM runs side by side (the
  vectorizer's interleave times the unroller's count) when the body holds a reduction
  group. The dependency arm lets that many groups overlap; more would let chains overlap
  beyond what the arm allows.

Each is a sweep over the kinds of reduction with the smallest bodies (a multiply-add, an add,
a max; the smallest bodies are unrolled and interleaved the most), asserting the constant
covers every build, and that the sweep saw the effect at all (the constant is not vacuous
only because nothing was detected).
"""

from __future__ import annotations

import pytest
from tvm_ext.cost.roofline import MAX_LOCKSTEP
from tvm_ext.cost.walk import AUTO_VECTOR_INNER_LIMIT, UNROLL_REACH

from tvm_ext.base import tvm_api
from tvm_ext.built_code.asm_text import basic_blocks

te = tvm_api.te
TRIPLE = "x86_64-unknown-linux-gnu"
CPUS = ("haswell", "skylake-avx512", "sapphirerapids", "znver3", "znver4", "znver5")
STEP = {
    "fma": ("vfmadd", "vfnmadd", "vfmsub"),
    "add": ("vaddp", "vadds"),
    "max": ("vmaxp", "vmaxs"),
}


def _targets():
    valid = tvm_api.global_func("target.llvm_is_valid_cpu")
    return [tvm_api.Target({"kind": "llvm", "mcpu": cpu, "mtriple": TRIPLE, "num-cores": 2})
            for cpu in CPUS if valid(cpu, TRIPLE)]  # fmt: skip


def _reduction(n: int, e: int, op: str, spatial_inner: bool):
    """``C[i] = reduce_k A[k, i] (* B[k])``, ``k`` inside ``i``, the init before ``k``.
    ``spatial_inner``: ``A[k, i]`` (vectorizing ``i`` is unit stride), else ``A[i, k]``."""
    a = te.placeholder((e, n) if spatial_inner else (n, e), "float32", name="A")
    b = te.placeholder((e,), "float32", name="B")
    k = te.reduce_axis((0, e), name="k")

    def term(i):
        x = a[k, i] if spatial_inner else a[i, k]
        return x * b[k] if op == "fma" else x

    reduce = te.max if op == "max" else te.sum
    c = te.compute((n,), lambda i: reduce(term(i), axis=k), name="C")
    sch = tvm_api.Schedule(te.create_prim_func([a, b, c]))
    block = sch.get_sblock("C")
    sch.decompose_reduction(block, sch.get_loops(block)[1])
    return sch.mod


def _steps(text: str, op: str) -> tuple[int, int, list[int]]:
    """(packed steps, scalar steps, steps in each single-block loop) of the built code."""
    packed = scalar = 0
    for line in text.splitlines():
        parts = line.split(None, 1)
        if len(parts) == 2 and parts[0].startswith(STEP[op]):
            if parts[0].endswith("ps") and "mm" in parts[1]:
                packed += 1
            elif parts[0].endswith("ss"):
                scalar += 1
    blocks, _ = basic_blocks(text)
    loops = [
        sum(1 for mnemonic, _ in b.code if mnemonic.startswith(STEP[op]))
        for b in blocks
        if b.code and b.code[-1][0].startswith("j") and b.code[-1][1].strip() in b.labels
    ]
    return packed, scalar, loops


def _asm(mod, target) -> str:
    return tvm_api.assembly(tvm_api.build(mod, target))


@pytest.mark.parametrize("target", _targets(), ids=lambda t: str(t.attrs["mcpu"]))
def test_no_outer_loop_is_vectorized_or_unrolled_beyond_the_reach(target):
    assert UNROLL_REACH >= AUTO_VECTOR_INNER_LIMIT
    vectorized = []
    for e in (4, 16, 64, 256, AUTO_VECTOR_INNER_LIMIT + 1, 2 * AUTO_VECTOR_INNER_LIMIT):
        for op in ("fma", "add"):
            packed, scalar, _ = _steps(_asm(_reduction(64, e, op, True), target), op)
            if packed:
                vectorized.append(e)
            # Fully unrolled, the nest would show e steps for one output at least.
            _, inner_scalar, _ = _steps(_asm(_reduction(64, e, op, False), target), op)
            if e > UNROLL_REACH:
                assert packed == 0, (e, op)
                assert packed + scalar < e and inner_scalar < e, (e, op)
    assert vectorized, "no outer loop was vectorized at any extent: the sweep detects nothing"
    assert max(vectorized) <= AUTO_VECTOR_INNER_LIMIT


def test_loop_copies_side_by_side_stay_within_max_lockstep():
    copies = []
    for target in _targets():
        for op in ("fma", "add", "max"):
            for e in (2, 3, 4):
                _, _, loops = _steps(_asm(_reduction(4096, e, op, True), target), op)
                # The reduction unrolled whole (e steps per output) in each copy.
                copies += [(steps / e, str(target.attrs["mcpu"]), op, e) for steps in loops]
    assert max(copies)[0] > 1, "no loop ran copies side by side: the sweep detects nothing"
    assert max(copies)[0] <= MAX_LOCKSTEP, max(copies)
