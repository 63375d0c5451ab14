"""The process's other thread pools, kept off the cores a measurement is about to use.

numpy's OpenBLAS wakes its worker threads for a parallel call and leaves them spinning after
it returns: measured on a 2-core Zen 5, a 512x512 float64 matmul left one worker at 100 % of a
core for ~110 ms (an OpenMP runtime, torch's, spins too). A TVM kernel timed in that window
shares its cores with the spinner. Every parity check computes a numpy reference just before
the timing, so measurements of matmul-like kernels were taken beside a spinning BLAS worker:
the same stock matmul 256^3 candidate measured 1.3-1.6 ms in some processes and 3.99 ms in
others (its worker time-sliced with the spinner on the core TVM pins it to); with the
reference computed single-threaded, 1.2-1.6 ms in every process.

- :func:`reference_threads`: compute a reference inside it. BLAS and OpenMP pools (and
  torch's intra-op pool, when torch is loaded) run on the calling thread only, so no worker
  wakes and none is left spinning. A reference is small next to the kernel it checks.
- :func:`settle`: wait (bounded) until no other thread of this process burns CPU, for what
  the caller's own code left spinning before a measurement.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
from typing import Iterator

import psutil
from threadpoolctl import threadpool_limits

log = logging.getLogger(__name__)


@contextlib.contextmanager
def reference_threads() -> Iterator[None]:
    """Run the body with every BLAS/OpenMP pool (and torch's, if loaded) at one thread; the
    previous limits are restored on exit."""
    torch = sys.modules.get("torch")
    before = torch.get_num_threads() if torch is not None else None
    try:
        if torch is not None:
            torch.set_num_threads(1)
        with threadpool_limits(limits=1):
            yield
    finally:
        if torch is not None:
            torch.set_num_threads(before)


def other_threads_cpu_s() -> float:
    """CPU seconds used so far by every thread of this process but the calling one (the
    kernel counts in clock ticks: 10 ms steps)."""
    me = threading.get_native_id()
    return sum(t.user_time + t.system_time for t in psutil.Process().threads() if t.id != me)


def settle(timeout_s: float = 1.0, window_s: float = 0.05, busy: float = 0.25) -> bool:
    """Wait until the process's other threads use at most ``busy`` of a core over a window of
    ``window_s`` (spinning pool workers have parked), at most ``timeout_s``. True when they
    did; False, with a warning logged, when they were still busy at the timeout."""
    deadline = time.monotonic() + timeout_s
    before = other_threads_cpu_s()
    while True:
        time.sleep(window_s)
        now = other_threads_cpu_s()
        if now - before <= busy * window_s:
            return True
        if time.monotonic() >= deadline:
            log.warning(
                "other threads of this process used %.0f ms of CPU in the last %.0f ms: the "
                "measurement that follows shares its cores with them",
                (now - before) * 1e3,
                window_s * 1e3,
            )
            return False
        before = now
