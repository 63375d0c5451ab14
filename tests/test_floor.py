"""The proven floor of a function: below every schedule's bound and every measured run."""

from __future__ import annotations

import pytest
from tvm_ext.cost import RooflinePolicy, evaluate, floor_s

from tvm_ext import kernels as K
from tvm_ext import measure
from tvm_ext import schedules as S


@pytest.mark.parametrize(
    "w", [K.matmul(96, 64, 128), K.softmax(64, 256), K.conv2d(1, 8, 14, 14, 8, 3, 3, 1, 1)]
)
def test_the_floor_is_below_every_schedule(w, host, machine):
    floor = floor_s(w.func, host, machine=machine)
    assert floor is not None and floor > 0
    policy = RooflinePolicy()
    for obj in (w.func, S.schedule(w, host)):
        bound = evaluate(policy, obj, host, machine=machine).lower_bound_s
        assert floor <= bound * (1 + 1e-9), (w.key, floor, bound)
    # The floor is the FLOPs on every core at full width: a naive (one core, scalar) schedule
    # sits far above it, and every run at or above it.
    naive = evaluate(policy, w.func, host, machine=machine).lower_bound_s
    assert naive > 1.5 * floor
    assert measure(S.schedule(w, host), w, host, repeat=3).seconds >= floor
