"""Where a model's next batch of trials goes: to the task with the largest bound-limited gain.

A task's incumbent (best time measured so far) minus its proven lower bound is the most any
schedule can still save on one call of it; times its weight (calls per model run), the most
it can save on the model. MetaSchedule's and Ansor's gradient schedulers estimate the gain of
a task from its recent improvement; neither knows this ceiling. Here the expected gain of a
batch is the recent improvement rate (per trial, times the batch), capped by the ceiling:

    gain = weight x min(expected improvement, incumbent - bound)

A task never measured yet expects its whole ceiling (it is explored first). A task whose
incumbent is within ``retire_factor`` of its bound is retired: no schedule can make it more
than that factor faster, and its trials are better spent elsewhere.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

# A task within 1.25x of its proven bound is retired: the bound is a floor no schedule beats,
# so at most 20 % of that task's time remains to be won.
RETIRE_FACTOR = 1.25


@dataclass
class TaskState:
    """What the scheduler knows of one task (one deduplicated PrimFunc of a model)."""

    name: str
    weight: float  # calls per model run
    bound_s: float | None  # proven lower bound of one call (None: no bound is proven)
    incumbent_s: float = math.inf  # best time of one call measured so far
    trials: int = 0
    history: list = field(default_factory=list)  # incumbent after each batch, oldest first

    def ceiling_s(self) -> float:
        """The most any schedule can still save per model run (inf without a bound)."""
        if not math.isfinite(self.incumbent_s):
            return math.inf
        bound = self.bound_s or 0.0
        return self.weight * max(self.incumbent_s - bound, 0.0)

    def retired(self, factor: float = RETIRE_FACTOR) -> bool:
        return (
            self.bound_s is not None
            and math.isfinite(self.incumbent_s)
            and self.incumbent_s <= factor * self.bound_s
        )

    def record(self, batch_best_s: float | None, trials: int) -> None:
        """Account a measured batch: its best time (None when nothing ran) and its size."""
        self.trials += trials
        if batch_best_s is not None:
            self.incumbent_s = min(self.incumbent_s, batch_best_s)
        self.history.append(self.incumbent_s)


def expected_gain_s(task: TaskState, batch: int, window: int = 3) -> float:
    """Seconds per model run one more batch of ``batch`` trials is expected to save.

    The recent improvement rate over the last ``window`` batches (per trial, times ``batch``),
    capped by the task's ceiling; a task with no measured batch yet expects its ceiling. A
    task whose last batches improved nothing still expects a small share (a tenth of its
    ceiling, spread over ``window`` batches) so a stalled search is retried once the others
    stall too, never before a task that is still improving.
    """
    ceiling = task.ceiling_s()
    if len(task.history) < 2 or not math.isfinite(task.history[-2]):
        return ceiling
    recent = task.history[-(window + 1) :]
    improved = task.weight * max(recent[0] - recent[-1], 0.0)
    per_batch = improved / (len(recent) - 1)
    floor = 0.1 * ceiling / window if math.isfinite(ceiling) else 0.0
    return min(max(per_batch, floor), ceiling) if math.isfinite(ceiling) else per_batch


def next_task(tasks: list[TaskState], batch: int, retire_factor: float = RETIRE_FACTOR):
    """Index of the task that gets the next batch, or None when every task is retired (or no
    task can gain anything). Ties go to the task with fewer trials, then to the first."""
    best, best_key = None, None
    for i, task in enumerate(tasks):
        if task.retired(retire_factor):
            continue
        gain = expected_gain_s(task, batch)
        if gain <= 0.0:
            continue
        key = (gain, -task.trials, -i)
        if best_key is None or key > best_key:
            best, best_key = i, key
    return best


def spend(states: list[TaskState], trials: int, batch: int, run_batch,
          retire_factor: float = RETIRE_FACTOR) -> list[tuple[int, int]]:  # fmt: skip
    """Spend a budget of ``trials`` batch by batch: each batch of ``batch`` trials (the last
    one smaller) goes to :func:`next_task`'s choice, ``run_batch(index, trials)`` runs it and
    returns the batch's best time of one call (None: nothing measured), which the task's state
    records. Stops when the budget is spent or no task can gain anything (every task retired).
    Returns (task index, trials) per batch, in order."""
    spent, batches = 0, []
    while spent < trials:
        i = next_task(states, batch, retire_factor)
        if i is None:
            break
        n = min(batch, trials - spent)
        states[i].record(run_batch(i, n), n)
        spent += n
        batches.append((i, n))
    return batches
