"""A tqdm progress bar fed by MetaSchedule's measure callbacks."""

from __future__ import annotations

import math
import time

from tqdm import tqdm  # plain text: tqdm.auto wants ipywidgets inside notebooks

from . import _tvm

ms = _tvm.meta_schedule()


@_tvm.tvm.ir.utils.derived_object
class ProgressCallback(ms.measure_callback.PyMeasureCallback):
    """Shows trials done, the best GFLOP/s so far and how many candidates the cut dropped."""

    def __init__(self, trials: int, flops: int | None, stats, started: float, enabled: bool = True):
        super().__init__()
        self.flops, self.stats, self.best, self.started = flops, stats, math.inf, started
        self.first_measured_s: float | None = None  # seconds from tune() to the first result
        self.bar = tqdm(
            total=trials, desc="tuning", unit="trial", disable=not enabled, dynamic_ncols=True
        )

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results):
        if self.first_measured_s is None:
            self.first_measured_s = time.perf_counter() - self.started
        for result in runner_results:
            secs = result.run_secs
            if secs is not None and len(secs) and float(secs[0]) < 1e9:
                self.best = min(self.best, sum(float(s) for s in secs) / len(secs))
        best = min(self.best, self.stats.incumbent_s)
        postfix = {"dropped": self.stats.dropped}
        if self.flops and math.isfinite(best):
            postfix["best GFLOP/s"] = f"{self.flops / best / 1e9:.1f}"
        self.bar.set_postfix(postfix)
        self.bar.update(len(runner_results))

    def close(self) -> None:
        self.bar.close()
