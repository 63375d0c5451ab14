"""The model task scheduler's choices on crafted task states."""

from __future__ import annotations

import math

import pytest

from tvm_ext.model_pipeline.task_scheduler import TaskState, expected_gain_s, next_task, spend


def test_a_task_at_its_bound_gets_nothing_however_heavy():
    at_bound = TaskState("matmul", weight=100.0, bound_s=1e-3, incumbent_s=1.1e-3)
    slack = TaskState("softmax", weight=1.0, bound_s=1e-5, incumbent_s=1e-4)
    assert at_bound.retired() and not slack.retired()
    assert next_task([at_bound, slack], batch=16) == 1
    assert next_task([at_bound], batch=16) is None


def test_the_largest_bound_limited_gain_goes_first():
    # B is slower per call, but its bound says it can save 0.2 ms a run; A can save 1.8 ms.
    a = TaskState("a", weight=2.0, bound_s=1e-4, incumbent_s=1e-3)
    b = TaskState("b", weight=1.0, bound_s=4.8e-3, incumbent_s=5e-3)
    assert a.ceiling_s() == pytest.approx(1.8e-3) and b.ceiling_s() == pytest.approx(2e-4)
    assert next_task([b, a], batch=16) == 1


def test_recent_improvement_is_capped_by_the_ceiling():
    fast = TaskState("fast", weight=1.0, bound_s=0.9e-3, incumbent_s=math.inf)
    for best in (5e-3, 1e-3):  # improved 4 ms in one batch, but only 0.1 ms remains
        fast.record(best, trials=16)
    assert expected_gain_s(fast, batch=16) == pytest.approx(0.1e-3)


def test_an_improving_task_beats_a_stalled_one_and_a_new_one_is_explored():
    stalled = TaskState("stalled", weight=1.0, bound_s=1e-4, incumbent_s=math.inf)
    improving = TaskState("improving", weight=1.0, bound_s=1e-4, incumbent_s=math.inf)
    for _ in range(4):
        stalled.record(2e-3, trials=16)
    for best in (3e-3, 2.5e-3, 2e-3, 1.5e-3):
        improving.record(best, trials=16)
    assert next_task([stalled, improving], batch=16) == 1
    assert expected_gain_s(stalled, batch=16) > 0  # retried once the others stall too
    fresh = TaskState("fresh", weight=1.0, bound_s=1e-4, incumbent_s=1e-3)  # rule time only
    assert next_task([stalled, improving, fresh], batch=16) == 2


def test_a_task_without_a_bound_is_never_retired():
    unproven = TaskState("opaque", weight=1.0, bound_s=None, incumbent_s=1e-3)
    assert not unproven.retired() and unproven.ceiling_s() == pytest.approx(1e-3)
    assert next_task([unproven], batch=8) == 0


def _halving(states):
    """A batch that halves the distance between a task's incumbent and its bound."""

    def run(i, n):
        s = states[i]
        return s.bound_s + (s.incumbent_s - s.bound_s) / 2

    return run


def test_a_budget_goes_where_the_bound_leaves_room_and_is_spent_exactly():
    states = [
        TaskState("heavy_at_bound", weight=50.0, bound_s=1e-3, incumbent_s=1.2e-3),
        TaskState("big", weight=1.0, bound_s=1e-4, incumbent_s=4e-3),  # can save 3.9 ms
        TaskState("small", weight=1.0, bound_s=1e-4, incumbent_s=1e-3),  # can save 0.9 ms
    ]
    batches = spend(states, trials=40, batch=16, run_batch=_halving(states))
    assert batches[0] == (1, 16)  # the largest bound-limited gain first
    assert all(i != 0 for i, _ in batches) and states[0].trials == 0  # at its bound: nothing
    assert [n for _, n in batches] == [16, 16, 8]  # the budget, and not a trial more
    assert sum(s.trials for s in states) == 40


def test_spending_stops_once_every_task_is_retired():
    states = [
        TaskState("a", weight=1.0, bound_s=1e-4, incumbent_s=1e-3),
        TaskState("b", weight=2.0, bound_s=1e-4, incumbent_s=1e-3),
    ]
    batches = spend(states, trials=1000, batch=16, run_batch=lambda i, n: states[i].bound_s)
    assert sorted(i for i, _ in batches) == [0, 1] and batches[0][0] == 1  # heavier first
    assert all(s.retired() for s in states)


def test_a_batch_that_measured_nothing_keeps_the_incumbent():
    states = [TaskState("x", weight=1.0, bound_s=1e-4, incumbent_s=1e-3)]
    spend(states, trials=16, batch=8, run_batch=lambda i, n: None)
    assert states[0].incumbent_s == 1e-3 and states[0].trials == 16
