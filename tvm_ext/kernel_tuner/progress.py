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
    """Shows trials done, the best GFLOP/s so far, how many candidates the cut dropped (in all,
    and before build + after build) and how many failed to build or run."""

    def __init__(self, trials: int, flops: int | None, stats, started: float, enabled: bool = True):
        super().__init__()
        self.flops, self.stats, self.best, self.started = flops, stats, math.inf, started
        self.failed = 0
        self.withheld = 0  # stage-2 drops of the stats seen so far (they reach us as failures)
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
        # A candidate withheld after build reaches MetaSchedule as a build without artifact:
        # it is dropped, not failed (the strategy counts both before this callback runs).
        s = self.stats
        withheld = s.withheld
        self.failed -= withheld - self.withheld
        self.withheld = withheld
        best = min(self.best, s.incumbent_s)
        postfix = {
            "dropped": f"{s.dropped} ({s.dropped_stage1}+{s.dropped_stage2})",
            "failed": self.failed,
        }
        if self.flops and math.isfinite(best):
            postfix["best GFLOP/s"] = f"{self.flops / best / 1e9:.1f}"
        self.bar.set_postfix(postfix)
        self.bar.update(len(runner_results))

    def close(self) -> None:
        self.bar.close()
