"""A tqdm progress bar fed by MetaSchedule's measure callbacks."""

from __future__ import annotations

import math
import time

from tqdm import tqdm  # plain text: tqdm.auto wants ipywidgets inside notebooks

from tvm_ext.base import tvm_api
from tvm_ext.records.logs import run_seconds

ms = tvm_api.ms


@tvm_api.derived_object
class ProgressCallback(ms.measure_callback.PyMeasureCallback):
    """Shows trials done, the best GFLOP/s so far, how many candidates the cut dropped and how
    many failed to build or run."""

    def __init__(self, trials: int, flops: int | None, stats, started: float, enabled: bool = True):
        super().__init__()
        self.flops, self.stats, self.best, self.started = flops, stats, math.inf, started
        self.failed = 0
        self.bar = tqdm(
            total=trials, desc="tuning", unit="trial", disable=not enabled, dynamic_ncols=True
        )

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results):
        self.record(runner_results)

    def record(self, runner_results) -> None:
        """Count one batch's results and redraw the bar."""
        if self.stats.first_measured_s is None:
            self.stats.first_measured_s = time.perf_counter() - self.started
        for result in runner_results:
            secs = run_seconds(result.run_secs)
            if secs is not None:
                self.best = min(self.best, secs)
            else:
                self.failed += 1
        best = min(self.best, self.stats.incumbent_s)
        postfix = {"dropped": self.stats.dropped, "failed": self.failed}
        if self.flops and math.isfinite(best):
            postfix["best GFLOP/s"] = f"{self.flops / best / 1e9:.1f}"
        self.bar.set_postfix(postfix)
        self.bar.update(len(runner_results))

    def close(self) -> None:
        self.bar.close()
