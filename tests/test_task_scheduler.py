"""The model task scheduler's choices on crafted task states."""

from __future__ import annotations

import math

import pytest

from tvm_ext.search.task_scheduler import TaskState, expected_gain_s, next_task


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
