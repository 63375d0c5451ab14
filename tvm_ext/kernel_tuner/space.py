"""MetaSchedule's design space for a target, as the search explores it."""

from __future__ import annotations

from tvm_ext.base import tvm_api


def design_space(target):
    """MetaSchedule's design space for ``target``.

    For CPUs: the stock x86 rules less ``MultiLevelTilingWithIntrin``, whose VNNI/AVX-512
    intrinsics are the one reason to import TVM's tensor-intrinsic modules (1-40 s) and whose
    ``vpdpbusd`` call fails LLVM 22's verifier in TVM 0.27 anyway; int8 tensorization comes
    from our own hand schedule instead. CUDA keeps the stock space.
    """
    if target.kind.name != "llvm":
        return "post-order-apply"
    ms = tvm_api.ms
    sr = ms.schedule_rule
    rules = [
        sr.ApplyCustomRule(),
        sr.InlineConstantScalars(),
        sr.AutoInline(
            into_producer=False,
            into_consumer=True,
            inline_const_tensor=True,
            disallow_if_then_else=True,
            require_injective=True,
            require_ordered=True,
            disallow_op=["tirx.exp"],
        ),
        sr.AddRFactor(max_jobs_per_core=16, max_innermost_factor=64),
        sr.MultiLevelTiling(
            structure="SSRSRS",
            tile_binds=None,
            max_innermost_factor=64,
            vector_load_lens=None,
            reuse_read=None,
            reuse_write=sr.ReuseType(req="may", levels=[1, 2], scope="global"),
        ),
        sr.ParallelizeVectorizeUnroll(
            max_jobs_per_core=16,
            max_vectorize_extent=64,
            unroll_max_steps=[0, 16, 64, 512],
            unroll_explicit=True,
        ),
        sr.RandomComputeLocation(),
    ]
    return ms.space_generator.PostOrderApply(
        sch_rules=rules, postprocs="llvm", mutator_probs="llvm"
    )
