"""Odd extents: what an extent one or two past a multiple of 16 (or a model's own: 197
tokens, 1000 classes, 24 channels) costs under the rules, against the same kernel padded up
to the next multiple of 16, and against the function unscheduled.

Per kernel family, a function as a user or a model has it (TE as a user writes it; Relax ops
legalized as a model's are), at each odd extent ``n`` and at ``ceil(n / 16) * 16``: the rules
schedule it (``tvm_ext.schedules.rules.schedule_func``, the rule named in the table), parity
is checked against the unscheduled build on random inputs, then both are timed by TVM's
``time_evaluator`` (``tvm_ext.measure``: median of ``--repeat`` runs of >= ``--min-ms``) with
the target's threads, in interleaved rounds. ``odd / padded`` compares times per call (the
padded kernel does more work: a ratio under 1.3 is the target); ``x unscheduled`` is the
unscheduled time over ours.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python bench/odd_extents.py \
        [--families matmul,bmm_nt,softmax,conv_nhwc,depthwise,gemv] [--no-readme]
"""

from __future__ import annotations

from _unpin import rerun_unpinned  # noqa: E402

rerun_unpinned()  # before numpy loads OpenBLAS

import argparse  # noqa: E402
import statistics  # noqa: E402

import pandas as pd  # noqa: E402
from _common import blas_report, cpu_name, write_section  # noqa: E402
from tvm import relax, te, topi  # noqa: E402
from tvm_ext.schedules.rules import schedule_func  # noqa: E402

import tvm_ext  # noqa: E402
from tvm_ext.base.tvm_api import physical_cores  # noqa: E402
from tvm_ext.hardware.target import host_target, target_cpu  # noqa: E402
from tvm_ext.workloads.legalized import legalized_func  # noqa: E402


def matmul(n):
    """A user's TE matmul + bias + ReLU, n x n x 256."""
    A, B = te.placeholder((n, 256), name="A"), te.placeholder((256, n), name="B")
    bias = te.placeholder((n,), name="bias")
    k = te.reduce_axis((0, 256), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    D = te.compute((n, n), lambda i, j: te.max(C[i, j] + bias[j], 0.0), name="D")
    return te.create_prim_func([A, B, bias, D])


def bmm_nt(n):
    """Attention scores: 12 heads x n x n x 64, B transposed (ViT at 197 tokens)."""
    q, kt = te.placeholder((12, n, 64), name="Q"), te.placeholder((12, n, 64), name="K")
    return te.create_prim_func([q, kt, topi.nn.batch_matmul(q, kt, transpose_b=True)])


def softmax(n):
    """Softmax over the last axis of 12 x n x n scores."""
    return legalized_func(lambda x: relax.op.nn.softmax(x, axis=-1), [("x", (12, n, n))])


def conv_nhwc(n):
    """A 3x3 convolution, n channels in and out, on a 14 x 14 map, NHWC / OHWI."""
    return legalized_func(
        lambda x, w: relax.op.nn.conv2d(x, w, padding=1, data_layout="NHWC", kernel_layout="OHWI"),
        [("x", (1, 14, 14, n)), ("w", (n, 3, 3, n))],
        free=(1,),
    )


def depthwise(n):
    """A 3x3 depthwise convolution, n channels, 28 x 28 map, stride 1, NHWC / OHWI."""
    return legalized_func(
        lambda x, w: relax.op.nn.conv2d(
            x, w, padding=1, groups=n, data_layout="NHWC", kernel_layout="OHWI"
        ),
        [("x", (1, 28, 28, n)), ("w", (n, 3, 3, 1))],
        free=(1,),
    )


def gemv(n):
    """A classifier head: 1 x 1280 @ 1280 x n + bias (mobilenet_v2's 1000 classes)."""
    return legalized_func(
        lambda x, w, b: relax.op.add(relax.op.matmul(x, w), b),
        [("x", (1, 1280)), ("w", (1280, n)), ("b", (n,))],
        free=(1, 2),
    )


FAMILIES = {
    "matmul": (matmul, [65, 66, 197]),
    "bmm_nt": (bmm_nt, [49, 50, 197]),
    "softmax": (softmax, [49, 50, 197]),
    "conv_nhwc": (conv_nhwc, [33, 34, 24, 40]),
    "depthwise": (depthwise, [33, 34, 24, 40, 58, 116]),
    "gemv": (gemv, [1000, 1025]),
}


def measure_row(odd, padded, target, args):
    """(rule, ours s at n, ours s padded, unscheduled s at n): each the median over
    ``--rounds`` interleaved rounds (a noisy neighbour hits all three alike), every round a
    parity-checked ``tvm_ext.measure`` (median of ``--repeat`` runs of >= ``--min-ms``)."""
    odd, padded = (f.with_attr("global_symbol", "main") for f in (odd, padded))
    (ours, rule), (even, _) = schedule_func(odd, target), schedule_func(padded, target)
    kw = {"repeat": args.repeat, "min_repeat_ms": args.min_ms}
    # A weight's repack into panels runs once, at compile time, in a model: not timed here.
    subjects = [(ours, odd, True), (even, padded, True), (odd, odd, False)]
    times = [[], [], []]
    for _ in range(args.rounds):
        for spot, (obj, reference, repacked) in zip(times, subjects):
            m = tvm_ext.measure(obj, target=target, reference=reference,
                                weights_repacked_once=repacked, **kw)  # fmt: skip
            spot.append(m.seconds)
    return (rule, *(statistics.median(t) for t in times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--min-ms", type=int, default=50)
    parser.add_argument("--no-readme", action="store_true")
    args = parser.parse_args()
    cores = physical_cores()
    target = host_target(num_cores=cores)
    print(f"CPU {cpu_name()}, LLVM mcpu={target_cpu(target)}, {cores} threads", flush=True)
    rows = []
    for family in args.families.split(","):
        make, extents = FAMILIES[family]
        for n in extents:
            padded = -(-n // 16) * 16
            rule, odd, even, plain = measure_row(make(n), make(padded), target, args)
            rows.append({
                "kernel": f"{family}: {make.__doc__.splitlines()[0]}",
                "n": n, "padded": padded, "rule": rule,
                "ours us (n)": odd * 1e6, "ours us (padded)": even * 1e6,
                "odd / padded": odd / even, "unscheduled us (n)": plain * 1e6,
                "x unscheduled": plain / odd,
            })  # fmt: skip
            print(rows[-1], flush=True)
    table = pd.DataFrame(rows)
    print(table.to_string(index=False))
    if args.no_readme:
        return
    header = (
        "### Odd extents (`bench/odd_extents.py`)\n\n"
        "`env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python bench/odd_extents.py`"
        f"\n\nRules only, {cores} threads (`-mcpu={target_cpu(target)}`); each kernel at an odd "
        "extent n and padded up to the next multiple of 16, and unscheduled at n; parity "
        "against the unscheduled build first; every time by TVM's `time_evaluator` "
        f"(`tvm_ext.measure`, median of {args.repeat} runs of >= {args.min_ms} ms), the three "
        f"of a row in {args.rounds} interleaved rounds, the median kept. "
        "`odd / padded`: time per call at n over at the padded extent (target <= 1.3); "
        "`x unscheduled`: unscheduled time over ours. Each row is the kernel alone: in a "
        "model, a weight whose output axis is no whole number of 8-lane statements (conv to "
        "33 or 34 channels, 1025 classes) is padded once at compile time instead "
        "(`tvm_ext.model_pipeline.layout.whole_vector_weights`), where the kernel alone pads "
        f"it per call or runs an odd vector. BLAS: {blas_report()}."
    )
    write_section("odd-extents", header, table)


if __name__ == "__main__":
    main()
