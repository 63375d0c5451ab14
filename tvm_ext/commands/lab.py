"""The schedule mini-lab: one kernel, several schedules, the three numbers for each."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable

import pandas as pd

from tvm_ext import schedules
from tvm_ext.base import tvm_api
from tvm_ext.base.errors import ParityError
from tvm_ext.base.host_threads import settle
from tvm_ext.cost import RooflinePolicy, evaluate
from tvm_ext.hardware.target import as_target, target_cores
from tvm_ext.kernel_tuner.tuner import tune
from tvm_ext.measurement.measure import measure, time_callable
from tvm_ext.model_pipeline.compile import compile, compile_untuned
from tvm_ext.schedules.teaching.lecture import lecture_cpu_matmul
from tvm_ext.workloads import kernels, models
from tvm_ext.workloads.models_torch import torch_eager

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LabRow:
    """One schedule of the lab: how to make it from a workload, and the bound it chases."""

    name: str
    make: Callable[[kernels.Workload], object]
    note: str


def default_rows(trials: int = 32) -> list[LabRow]:
    """Naive, the lecture's schedule, our hand schedule, and (``trials`` > 0) a tuned one."""

    rows = [
        LabRow(
            "naive",
            lambda w: w.func,
            "one core, k innermost: serial FMA chains, each step waiting on the last",
        ),
        LabRow(
            "lecture cpu",
            lecture_cpu_matmul,
            "32x32 tile + local accumulator + vectorize + parallel: chases the fp32 FMA roof",
        ),
        LabRow(
            "hand (library)",
            lambda w: schedules.schedule(w),
            "register-blocked micro-kernel over packed B panels: the fp32 FMA roof",
        ),
    ]
    if trials > 0:
        rows.append(
            LabRow(
                f"tuned ({trials} trials)",
                lambda w: tune(w.func, trials=trials, seed=0, progress=False).mod,
                "MetaSchedule + roofline pruning, seeded by the hand schedule",
            )
        )
    return rows


def run_lab(
    size: int = 512, target=None, rows: list[LabRow] | None = None, trials: int = 32
) -> pd.DataFrame:
    """Measure every row on ``matmul(size, size, size)``; a parity failure shows, not a speed.

    ``binding`` is the roofline arm that bounds the row's schedule, ``x_bound`` how far above
    that proven bound it ran."""

    target = as_target(target)
    workload = kernels.matmul(size, size, size)
    records = []
    for row in rows if rows is not None else default_rows(trials):
        record = {"schedule": row.name}
        try:
            obj = row.make(workload)
            m = measure(obj, workload, target)
        except ParityError as err:
            log.error("%s: %s", row.name, err)
            record.update(parity=f"FAIL ({err.max_rel_error:.1e})")
        else:
            record.update(
                parity=f"ok ({m.max_rel_error:.1e})",
                ms=m.seconds * 1e3,
                gflops=m.gflops,
                pct_peak=100 * m.peak_fraction,
                pct_roofline=100 * m.roofline_fraction,
            )
            cost = evaluate(RooflinePolicy(), obj, target, workload=workload)
            record.update(binding=cost.binding, x_bound=m.seconds / cost.lower_bound_s)
        record["note"] = row.note
        records.append(record)
    columns = [
        "schedule",
        "parity",
        "ms",
        "gflops",
        "pct_peak",
        "pct_roofline",
        "binding",
        "x_bound",
        "note",
    ]
    return pd.DataFrame.from_records(records, columns=columns)


def run_model_lab(name: str = "decoder", size: str = "full", target=None) -> pd.DataFrame:
    """One zoo model end to end: TVM untuned vs ours (the IR rules, no tuning) vs torch eager
    (when installed), each parity-checked against the model's numpy reference before it is
    timed, all on the target's ``num-cores`` threads and by one timer (``time_callable`` over
    a ready call: median of 5 samples of >= 50 ms). A contender that fails parity shows
    ``FAIL`` and no time; torch absent shows why."""

    target = as_target(target)
    model = models.build(name, size)
    records = []
    for label, make in (("TVM untuned", compile_untuned), ("ours (rules)", compile)):
        try:
            compiled = make(model, target)
        except ParityError as err:
            records.append({"contender": label, "parity": f"FAIL ({err.max_rel_error:.1e})"})
            continue
        _, rel = compiled.check()
        call = compiled.ready_call()
        settle()  # the reference's BLAS workers parked before the timing
        with tvm_api.threads(target_cores(target)):  # one timer for every contender
            seconds = time_callable(call, 0.05, 5)
        records.append({"contender": label, "parity": f"ok ({rel:.1e})", "ms": seconds * 1e3})
    try:
        call = torch_eager(model, target_cores(target))
    except ImportError:
        records.append({"contender": "torch eager", "parity": "not installed"})
    except ValueError as err:
        records.append({"contender": "torch eager", "parity": f"FAIL ({err})"})
    else:
        seconds = time_callable(call, 0.05, 5)
        records.append({"contender": "torch eager", "parity": "ok", "ms": seconds * 1e3})
    table = pd.DataFrame.from_records(records, columns=["contender", "parity", "ms"])
    untuned = table["ms"].iloc[0]
    table["x untuned"] = untuned / table["ms"]
    table["GFLOP/s"] = model.flops / (table["ms"] * 1e-3) / 1e9
    table.attrs["model"] = model
    return table
