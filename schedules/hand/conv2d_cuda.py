"""CUDA conv2d (NCHW): output tiles per block, input and weight tiles staged cooperatively
in shared memory per slice of input channels, a register tile of output channels per thread.

A block computes ``bf`` output channels x ``by x bx`` output pixels of one image; thread
``(ty, tx)`` owns ``tf`` channels of one pixel. For each slice of ``cc`` input channels all
threads together copy the (zero-padded) input window and the weights into shared memory,
synchronize, and accumulate. Padding is applied while staging, so no padded copy of the
input is ever written to global memory.
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm_ext.schedules.common import check, check_config, is_cuda

from tvm_ext.base import tvm_api
from tvm_ext.workloads.kernels import Workload

KERNELS = ("conv2d",)


@dataclass(frozen=True)
class Conv2dCUDAConfig:
    """``bf`` channels x ``by x bx`` pixels per block, ``tf`` channels per thread, ``cc``
    input channels per shared-memory stage."""

    bf: int = 32
    tf: int = 4
    by: int = 2
    bx: int = 8
    cc: int = 8

    @property
    def threads(self) -> int:
        return (self.bf // self.tf) * self.by * self.bx

    def validate(self, target, workload: Workload) -> None:
        check_config(self)
        a = workload.args
        for name, value, extent in (("bf", self.bf, a["F"]), ("cc", self.cc, a["C"])):
            if extent % value:
                raise ValueError(f"{name}={value} must divide {extent}")
        if self.bf % self.tf:
            raise ValueError(f"tf={self.tf} must divide bf={self.bf}")
        oh = (a["H"] + 2 * a["padding"] - a["KH"]) // a["stride"] + 1
        ow = (a["W"] + 2 * a["padding"] - a["KW"]) // a["stride"] + 1
        if oh % self.by or ow % self.bx:
            raise ValueError(f"pixel tile {self.by}x{self.bx} must divide the output {oh}x{ow}")
        if not 32 <= self.threads <= int(target.attrs["max_num_threads"]):
            raise ValueError(
                f"{self.threads} threads per block; must be 32..{target.attrs['max_num_threads']}"
            )


def applies(workload: Workload, target=None) -> bool:
    return workload.name in KERNELS


def _largest_divisor(n: int, cap: int) -> int:
    return max(d for d in range(1, min(n, cap) + 1) if n % d == 0)


def default_config(workload: Workload, target) -> Conv2dCUDAConfig:
    a = workload.args
    oh = (a["H"] + 2 * a["padding"] - a["KH"]) // a["stride"] + 1
    ow = (a["W"] + 2 * a["padding"] - a["KW"]) // a["stride"] + 1
    bf = _largest_divisor(a["F"], 32)
    tf = _largest_divisor(bf, 4)
    bx = _largest_divisor(ow, 16)
    by = _largest_divisor(oh, max(1, 128 // ((bf // tf) * bx)))
    while (bf // tf) * by * bx < 32 and tf > 1:
        tf //= 2 if tf % 2 == 0 else tf
    return Conv2dCUDAConfig(bf=bf, tf=tf, by=by, bx=bx, cc=_largest_divisor(a["C"], 8))


def _cooperative_copy(sch, block, under, ty: int, tx: int) -> None:
    """Spread the copy loops below ``under`` over all ``ty x tx`` threads."""
    loops = sch.get_loops(block)
    depth = [i for i, loop in enumerate(loops) if sch.get(loop).same_as(sch.get(under))][0]
    fused = sch.fuse(*loops[depth + 1 :])
    _, y, x = sch.split(fused, [None, ty, tx])
    sch.bind(y, "threadIdx.y")
    sch.bind(x, "threadIdx.x")


def schedule(workload: Workload, target, config: Conv2dCUDAConfig) -> "tvm_api.Schedule":
    check(applies(workload), f"conv2d_cuda: {workload.key} is not a conv2d")
    check(is_cuda(target), f"conv2d_cuda: target {target.kind.name} is not CUDA")
    config.validate(target, workload)
    c = config
    sch = tvm_api.Schedule(workload.func)
    conv = sch.get_sblock("conv")
    n, f, y, x, ci, r, s = sch.get_loops(conv)
    f0, f1, f2 = sch.split(f, [None, c.bf // c.tf, c.tf])
    y0, y1 = sch.split(y, [None, c.by])
    x0, x1 = sch.split(x, [None, c.bx])
    c0, c1 = sch.split(ci, [None, c.cc])
    sch.reorder(n, y0, x0, f0, f1, y1, x1, c0, c1, r, s, f2)
    sch.bind(sch.fuse(n, y0, x0), "blockIdx.x")
    sch.bind(f0, "blockIdx.y")
    sch.bind(f1, "threadIdx.y")
    pixel = sch.fuse(y1, x1)
    sch.bind(pixel, "threadIdx.x")
    acc = sch.cache_write(conv, 0, "local")
    sch.reverse_compute_at(acc, pixel)
    ty, tx = c.bf // c.tf, c.by * c.bx
    for index in (0, 1):
        shared = sch.cache_read(conv, index, "shared")
        sch.compute_at(shared, c0)
        _cooperative_copy(sch, shared, c0, ty, tx)
    sch.compute_inline(sch.get_sblock("pad"))  # zero padding happens while staging
    sch.unroll(f2)
    sch.decompose_reduction(conv, c0)
    sch.annotate(sch.get_sblock("root"), "pragma_auto_unroll_max_step", 64)
    return sch
