"""CPU conv2d (NCHW): an implicit GEMM over a blocked weight layout.

Weights are packed once into ``W[F/fb, C, KH, KW, fb]`` (the OIHW{fb}o blocked layout), the
padded input is materialized once, and each thread computes ``fb`` output channels x ``xt``
output columns of one output row in vector registers. With the vectors along channels (the
default where full vectors divide F), each (c, r, s) step loads ``fb/lanes`` weight vectors
and broadcasts one input value per column; along columns, one weight broadcast per channel
and one (unaligned) vector load of the input row feed ``fb`` FMAs.
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm_ext.schedules.common import ACC_SCOPE, check, check_config, is_cpu, lanes_for, vector_bits

from tvm_ext.base import tvm_api
from tvm_ext.workloads.kernels import Workload


@dataclass(frozen=True)
class Conv2dCPUConfig:
    """``fb`` output channels x ``xt`` output columns per register tile, ``lanes`` per vector;
    ``axis``: the vectors run along output columns (``"x"``: one weight broadcast per channel
    and one input-row load per step) or along output channels (``"f"``: one input broadcast per
    column and one weight-vector load per step)."""

    fb: int = 8
    xt: int = 16
    lanes: int = 16
    axis: str = "x"

    def validate(self, target, workload: Workload) -> None:
        check_config(self)
        if self.axis not in ("x", "f"):
            raise ValueError(f"axis={self.axis!r}: choose 'x' (columns) or 'f' (channels)")
        vectorized, name = (self.xt, "xt") if self.axis == "x" else (self.fb, "fb")
        if vectorized % self.lanes:
            raise ValueError(
                f"{name}={vectorized} must be a multiple of lanes={self.lanes} (axis={self.axis!r})"
            )
        if self.lanes > lanes_for(target, 32):
            raise ValueError(f"lanes={self.lanes} is wider than the target's vectors")
        ow = out_width(workload)
        if ow % self.xt:
            raise ValueError(f"xt={self.xt} must divide the output width {ow}")
        if workload.args["F"] % self.fb:
            raise ValueError(f"fb={self.fb} must divide F={workload.args['F']}")


def out_width(w: Workload) -> int:
    a = w.args
    return (a["W"] + 2 * a["padding"] - a["KW"]) // a["stride"] + 1


KERNELS = ("conv2d",)


def applies(workload: Workload, target=None) -> bool:
    return workload.name in KERNELS


def default_config(workload: Workload, target) -> Conv2dCPUConfig:
    """Vectors along output channels when full-width vectors divide F: one or two of them x
    the most output columns dividing the output width that keep the tile within 14
    accumulators (AVX-512's 32 registers; 12 of AVX2's 16, not measured). Measured against
    the column layout on 1x64x56x56, 1x128x28x28, 1x32x14x14 (3x3): 1.5-2.8x; and against
    power-of-two column counts: 7x7 1.7x, 14x14 2.5x, 28x28 and 56x56 the same. Otherwise
    vectors along columns: the widest dividing the output width, up to 8 per tile, and as
    many channels as keep the tile within 28 vector registers."""
    ow, f = out_width(workload), workload.args["F"]
    lanes = lanes_for(target, 32)
    if f % lanes == 0:
        budget = 14 if vector_bits(target) >= 512 else 12
        tiles = [
            (nv * xt, xt, nv)
            for nv in ((1, 2) if f % (2 * lanes) == 0 else (1,))
            for xt in range(1, budget // nv + 1)
            if ow % xt == 0
        ]
        _, xt, nv = max(tiles)
        return Conv2dCPUConfig(fb=nv * lanes, xt=xt, lanes=lanes, axis="f")
    while ow % lanes:
        lanes //= 2
    vectors = max(v for v in range(1, 9) if (ow // lanes) % v == 0)
    fb = max(d for d in range(1, min(f, 28 // vectors) + 1) if f % d == 0)
    return Conv2dCPUConfig(fb=fb, xt=lanes * vectors, lanes=lanes)


def schedule(workload: Workload, target, config: Conv2dCPUConfig) -> "tvm_api.Schedule":
    check(applies(workload), f"conv2d_cpu: {workload.key} is not a conv2d")
    check(is_cpu(target), f"conv2d_cpu: target {target.kind.name} is not a CPU")
    config.validate(target, workload)
    sch = tvm_api.Schedule(workload.func)
    conv, pad = sch.get_sblock("conv"), sch.get_sblock("pad")
    n, f, y, x, c, r, s = sch.get_loops(conv)
    f0, f1 = sch.split(f, [None, config.fb])
    x0, x1 = sch.split(x, [None, config.xt])
    if config.axis == "x":
        sch.reorder(n, f0, y, x0, c, r, s, f1, x1)
    else:
        sch.reorder(n, f0, y, x0, c, r, s, x1, f1)
    packed = sch.cache_read(conv, 1, "global")
    sch.transform_layout(
        packed, ("write", 0), lambda o, i, h, w: (o // config.fb, i, h, w, o % config.fb)
    )
    sch.parallel(sch.get_loops(packed)[0])
    sch.parallel(sch.fuse(*sch.get_loops(pad)[:2]))
    acc = sch.cache_write(conv, 0, ACC_SCOPE)
    if config.axis == "f":  # channels innermost in the tile: each accumulator one vector
        sch.transform_layout(conv, ("write", 0), lambda n, o, h, w: (n, h, w, o))
    sch.reverse_compute_at(acc, x0)
    sch.vectorize(sch.get_loops(acc)[-1])
    if config.axis == "x":
        xv, xl = sch.split(x1, [None, config.lanes])
        sch.unroll(f1)
        sch.unroll(xv)
        sch.vectorize(xl)
    else:
        fv, fl = sch.split(f1, [None, config.lanes])
        sch.unroll(x1)
        sch.unroll(fv)
        sch.vectorize(fl)
    sch.parallel(sch.fuse(n, f0, y))
    init = sch.decompose_reduction(conv, c)
    sch.vectorize(sch.get_loops(init)[-1])
    return sch
