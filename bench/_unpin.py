"""The benchmarks' peers at their best: the machines set ``OPENBLAS_CORETYPE`` and
``OPENBLAS_L2_SIZE``, which force numpy's OpenBLAS onto its AVX2 kernel. A bench script calls
:func:`rerun_unpinned` before anything imports numpy; tests and CI keep the pins. Imports
nothing but the standard library."""

from __future__ import annotations

import os
import sys

PINS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def rerun_unpinned() -> None:
    """Replace this process by the same command without the pins, when either is set."""
    if any(v in os.environ for v in PINS):
        env = {k: v for k, v in os.environ.items() if k not in PINS}
        os.execve(sys.executable, [sys.executable, *sys.argv], env)
