"""What a parallel loop costs on this host: the least work at which running it in parallel pays.

A parallel region wakes the thread pool and joins it: microseconds, that depend on the host
(its cores, its hypervisor, its pool), not on the kernel. Below some amount of work the
serial loop is faster; far above it the parallel one is. The rules compare each loop nest's
work (its iterations, :func:`tvm_ext.schedules.rules.fallback.work`) with
:func:`parallel_min_work`: probed here, once per CPU model and thread count, on the cheapest
iteration a rule emits (one vector lane of ``y = 2x + 1``), timed serial and split over the
target's threads at doubling sizes. The least size at which the parallel loop runs
:data:`PAYS` times faster than the serial one, at that size and the next (one lucky timing
is not enough), is the threshold. Each size is timed serial and parallel :data:`ROUNDS` times,
interleaved, and each arm's best kept: a neighbour on a shared host slows the parallel loop
most (it waits on a descheduled peer), so one pass reads the threshold high. On a 2-core
Zen 3 VM one pass cached 131072 (a fork and join of 2.1 us) where the host, quiet, paid
from 32768 (1.0 us); the rules then ran a 128 x 768 residual add serial, 15.7 us against
8.6 us parallel. A record probed another way (``how``) is probed again. Heavier iterations
pay sooner: the rules weigh an iteration by its memory accesses against the probe's
(:data:`PROBE_ACCESSES`); the heaviest they leave, a call to libm (``expf``: no vector form), is
timed too, and :func:`libm_weight` says how many cheap iterations one is worth. Cached
beside the machine model (``$TVM_EXT_CACHE_DIR`` or the user cache), probed again after
:data:`STALE_DAYS`; ``$TVM_EXT_PARALLEL_MIN_WORK`` sets the threshold instead (the test suite
pins it, so that a schedule's shape does not follow a noisy host). A target this host cannot
run (another triple, features the host lacks) gets :data:`DEFAULT_MIN_WORK`.
"""

from __future__ import annotations

import datetime
import functools
import json
import logging
import os
import pathlib

import numpy as np

from tvm_ext.base import tvm_api
from tvm_ext.base.files import atomic_write, cache_dir
from tvm_ext.base.host_threads import settle
from tvm_ext.hardware.device import Runtime
from tvm_ext.hardware.target import (
    host_triple,
    lanes_for,
    missing_features,
    target_cores,
    target_cpu,
)

log = logging.getLogger(__name__)

ENV = "TVM_EXT_PARALLEL_MIN_WORK"
DEFAULT_MIN_WORK = 1 << 16  # where nothing is probed: tens of thousands of cycles of work
PAYS = 1.25  # the parallel loop must run this much faster than the serial one
PROBE_ACCESSES = 2  # the memory accesses of the probe's iteration: one load, one store
ROUNDS = 3  # each size timed serial and parallel this many times, interleaved; the best kept
SIZES = tuple(1 << k for k in range(8, 23))  # floats: 1 KiB to 16 MiB per operand
NEVER = 1 << 62  # no size paid: every loop stays serial (one thread)
STALE_DAYS = 30
# How the threshold was probed; a record probed otherwise is probed again.
HOW = (f"least floats of y = 2x + 1 at which parallel ran {PAYS}x faster, twice; "
       f"each size best of {ROUNDS} interleaved rounds")  # fmt: skip


def parallel_min_work(target) -> int:
    """Iterations below which a loop nest runs serially on ``target`` (see the module)."""
    if os.environ.get(ENV):
        value = os.environ[ENV]
        if not value.isdigit() or int(value) < 1:
            raise ValueError(f"${ENV}={value!r}: give a positive number of loop iterations")
        return int(value)
    return _probed(target)["min_work"]


def libm_weight(target) -> float:
    """How many of the probe's cheap iterations one call to libm's ``expf`` costs on this host
    (a loop of such calls pays for a parallel region that many times sooner); 1 where nothing
    is probed or ``$TVM_EXT_PARALLEL_MIN_WORK`` sets the threshold."""
    return 1.0 if os.environ.get(ENV) else _probed(target)["libm_weight"]


def _probed(target) -> dict:
    return _record(str(target), str(cache_dir()))


def _runs_here(target) -> bool:
    triple = str(target.attrs.get("mtriple", "")) or host_triple()
    return triple == host_triple() and not missing_features(target)


@functools.lru_cache(maxsize=16)
def _record(target_text: str, folder: str) -> dict:
    """The probe's record for ``target_text``: cached in ``folder`` (probed when missing or
    stale), read once per process."""
    target = tvm_api.Target(target_text)
    if target.kind.name != "llvm" or not _runs_here(target):
        return {"min_work": DEFAULT_MIN_WORK, "libm_weight": 1.0}
    path = pathlib.Path(folder) / f"parallel-{target_cpu(target)}-{target_cores(target)}c.json"
    now = datetime.datetime.now(datetime.timezone.utc)
    try:
        data = json.loads(path.read_text())
        age = now - datetime.datetime.fromisoformat(data["when"])
        if age < datetime.timedelta(days=STALE_DAYS) and data.get("how") == HOW:
            return {"min_work": int(data["min_work"]), "libm_weight": float(data["libm_weight"])}
    except FileNotFoundError:
        pass
    except (ValueError, KeyError, TypeError) as err:
        log.warning("ignoring unreadable %s (%s); probing again", path, err)
    record = probe(target)
    how = HOW
    atomic_write(path, json.dumps(dict(record, when=now.isoformat(timespec="seconds"),
                                       how=how), indent=2))  # fmt: skip
    log.info("parallel loops pay from %d iterations on this host (%s)", record["min_work"], path)
    return {"min_work": record["min_work"], "libm_weight": record["libm_weight"]}


def probe(target) -> dict:
    """What this host's parallel loops cost for ``target``: ``min_work`` (the threshold),
    ``libm_weight`` (serial seconds of a loop of ``expf`` calls over those of the cheap loop,
    at the threshold's size) and ``seconds`` ({size: [serial, parallel]} of the cheap loop)."""
    cores, lanes = target_cores(target), lanes_for(target, 32)
    rows = tvm_api.te.var("rows")
    a = tvm_api.te.placeholder((cores, rows, lanes), "float32", name="a")
    y = tvm_api.te.compute(a.shape, lambda p, r, v: a[p, r, v] * 2.0 + 1.0, name="y")
    e = tvm_api.te.compute(a.shape, lambda p, r, v: tvm_api.te.exp(a[p, r, v]), name="e")
    libs = []
    for parallel in (False, True):
        sch = tvm_api.Schedule(
            tvm_api.te.create_prim_func([a, y]).with_attr("global_symbol", "main")
        )
        p, _, v = sch.get_loops(sch.get_sblock("y"))
        sch.vectorize(v)
        if parallel:
            sch.parallel(p)
        libs.append(tvm_api.build(sch.mod, target))
    exp = tvm_api.build(
        tvm_api.te.create_prim_func([a, e]).with_attr("global_symbol", "main"), target
    )  # fmt: skip  (a plain loop, as the rules leave a libm call)
    runtime = Runtime(target)
    times, paid, found = {}, [], NEVER
    settle()
    with runtime.threads_context():
        for n in SIZES:
            args = _arrays(n, cores, lanes, runtime)
            rounds = [[_seconds(lib, args, runtime) for lib in libs] for _ in range(ROUNDS)]
            times[_size(n, cores, lanes)] = pair = [min(arm) for arm in zip(*rounds)]
            paid = paid + [_size(n, cores, lanes)] if pair[0] >= PAYS * pair[1] else []
            if len(paid) == 2:
                found = paid[0]
                break
        at = _size(min(found, 1 << 14), cores, lanes)  # in cache, as the threshold's sizes are
        cheap = times.get(at, [None])[0] or _seconds(libs[0], _arrays(at, cores, lanes, runtime),
                                                     runtime)  # fmt: skip
        calls = _seconds(exp, _arrays(at, cores, lanes, runtime), runtime)
    return {"min_work": found, "libm_weight": max(calls / cheap, 1.0), "seconds": times}


def _size(n: int, cores: int, lanes: int) -> int:
    return cores * max(n // (cores * lanes), 1) * lanes


def _arrays(n: int, cores: int, lanes: int, runtime) -> list:
    x = np.ones((cores, max(n // (cores * lanes), 1), lanes), "float32")
    return [tvm_api.tensor(x, runtime.dev), tvm_api.tensor(np.empty_like(x), runtime.dev)]


def _seconds(lib, args, runtime) -> float:
    ev = lib.time_evaluator(lib.entry_name, runtime.dev, number=1, repeat=7, min_repeat_ms=5)
    ev(*args)  # warm the pool and the caches
    return float(min(ev(*args).results))
