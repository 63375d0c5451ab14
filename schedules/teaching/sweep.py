"""The lecture's cache-cliff experiment: GFLOP/s of the lecture CPU schedule vs tile size."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tvm_ext.schedules.teaching.lecture import LectureConfig, lecture_cpu_matmul

from tvm_ext.hardware.target import as_target
from tvm_ext.measurement.measure import measure
from tvm_ext.workloads.kernels import Workload

if TYPE_CHECKING:
    import pandas as pd


def tile_sweep(
    workload: Workload, target=None, sizes=(8, 16, 32, 64), k_tile: int = 4, repeat: int = 5
) -> pd.DataFrame:
    """Measure the lecture schedule (tile x tile output block, local accumulator) per tile size.

    Columns: ``tile``, ``acc_bytes`` (the local accumulator tile, which must stay in L1 for
    the schedule to run at speed), ``ms``, ``gflops``, ``pct_peak``, ``max_rel_error``.
    Every row passed parity before it was timed.
    """
    import pandas as pd  # lazy: pandas adds ~0.3 s to `import tvm_ext`

    target = as_target(target)
    acc_bytes = 4 if workload.dtype != "float64" else 8
    rows = []
    for tile in sizes:
        m = measure(
            lecture_cpu_matmul(workload, LectureConfig(tile=tile, k_tile=k_tile)),
            workload,
            target,
            repeat=repeat,
        )
        rows.append(
            {
                "tile": tile,
                "acc_bytes": tile * tile * acc_bytes,
                "ms": m.seconds * 1e3,
                "gflops": m.gflops,
                "pct_peak": 100 * m.peak_fraction,
                "max_rel_error": m.max_rel_error,
            }
        )
    return pd.DataFrame(rows)
