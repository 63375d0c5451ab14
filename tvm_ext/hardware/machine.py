"""Where a machine model comes from: probed once per CPU model and core count
(:mod:`tvm_ext.hardware.machine_probes`), then read from the user cache directory
(``tvm-ext info --reprobe`` measures again), with the user's overrides on top. The model itself
is :class:`~tvm_ext.hardware.machine_model.MachineModel`.

The cached model heals: a kernel measured faster than its roof proves the roof higher
(:func:`heal` raises the figure, persisted, one line per process); a figure that may read low
(provisional: its probes disagreed, or a kernel beat it) or older than :data:`STALE_DAYS` is
probed again the next time a process asks for the model (once per process), keeping the best
of the new probe and what was taken before (a probe or a kernel reads a roof low, never high).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import pathlib

from tvm_ext.base.files import atomic_write, cache_dir
from tvm_ext.hardware.device import Tracker
from tvm_ext.hardware.isa import fp32_peak_ceiling, microarchitecture
from tvm_ext.hardware.machine_model import LEVELS, Figure, MachineModel
from tvm_ext.hardware.machine_probes import probe, probe_device
from tvm_ext.hardware.target import as_target, host_table_cpu, target_cores, target_cpu

log = logging.getLogger(__name__)


def device_machine(target, tracker: Tracker, *, reprobe: bool = False) -> MachineModel:
    """The model of the devices under ``tracker.key`` (one device kind): probed there once,
    then read from the user cache directory."""
    target = as_target(target)
    name = f"machine-{target_cpu(target)}-{target_cores(target)}c-rpc-{tracker.key}.json"
    path = cache_path(target).parent / name  # beside this host's model
    return _cached(path, reprobe, lambda: probe_device(target, tracker))


def _cached(path: pathlib.Path, reprobe: bool, make, cpu: str | None = None) -> MachineModel:
    """The model cached at ``path``, else ``make()``'s (then cached); ``cpu``: the name the
    cached model must carry, or its microarchitecture's (a server die the probe ruled out); a
    model probed under another name is probed again."""
    model = None
    if path.exists() and not reprobe:
        try:
            model = MachineModel.from_json(json.loads(path.read_text()))
        except (ValueError, KeyError, TypeError) as err:
            log.warning("ignoring unreadable machine cache %s (%s); probing again", path, err)
        if model is not None and cpu is not None and model.cpu not in (cpu, microarchitecture(cpu)):
            log.warning("the machine cache %s names CPU %r, this host is %r; probing again",
                        path, model.cpu, cpu)  # fmt: skip
            model = None
    if model is None:
        model = make()
        atomic_write(path, json.dumps(model.to_json(), indent=2))
    return model


def cache_path(target) -> pathlib.Path:
    """Where the probe of this CPU model and core count is cached: in ``$TVM_EXT_CACHE_DIR``
    when it is set (read at each call; the test suite points it at a temporary folder), else
    in the user cache directory."""
    name = f"machine-{target_cpu(target)}-{target_cores(target)}c.json"
    return cache_dir() / name


STALE_DAYS = 30  # a probed figure older than this is probed again
RETRY_HOURS = 1  # a provisional figure older than this is probed again
_REFRESHED: set[str] = set()  # caches re-probed by this process (at most once each)
_HEALED: set[tuple] = set()  # models a kernel proved low in this process (one line each)
_PENDING: set[str] = set()  # caches a kernel raised and this process has not re-probed


def host_machine(
    target=None, *, reprobe: bool = False, overrides: dict | None = None
) -> MachineModel:
    """The machine model of ``target`` (default the host): cached probe (probed again when a
    figure is provisional or stale, once per process), then ``overrides``."""
    target = as_target(target)
    triple = str(target.attrs.get("mtriple", "")) or None
    path = cache_path(target)
    model = _cached(path, reprobe, lambda: probe(target), host_table_cpu(triple))
    key = str(path)
    if reprobe:
        _REFRESHED.add(key)
        _PENDING.discard(key)
    elif key in _PENDING or (key not in _REFRESHED and needs_probe(model)):
        _REFRESHED.add(key)
        _PENDING.discard(key)
        log.info("re-probing the machine model in %s (a figure was provisional or stale)", path)
        model = _merged(probe(target), model)
        atomic_write(path, json.dumps(model.to_json(), indent=2))
    return model.with_overrides(overrides) if overrides else model


def needs_probe(model: MachineModel, now: datetime.datetime | None = None) -> bool:
    """Whether a probed or measured figure of ``model`` has no date, is older than
    :data:`STALE_DAYS`, or is provisional and older than :data:`RETRY_HOURS` (a host busy
    for a while is not probed again by every process)."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    for figure in model.figures().values():
        if figure.source not in ("probed", "measured"):
            continue
        try:
            age = now - datetime.datetime.fromisoformat(figure.when)
        except ValueError:  # no date (a cache written before dates were kept), or garbled
            return True
        if age > datetime.timedelta(days=STALE_DAYS):
            return True
        if figure.provisional and age > datetime.timedelta(hours=RETRY_HOURS):
            return True
    return False


def _merged(fresh: MachineModel, cached: MachineModel) -> MachineModel:
    """``fresh``, except where ``cached`` holds a better figure: a probe or a kernel can only
    read a roof low (a peak or bandwidth lower, a latency longer than the hardware's), so the
    best figure ever taken is the closest to it; it keeps its date and whether it is
    provisional from the fresh probe, which did not beat it."""
    better = {}
    for name, old in cached.figures().items():
        new = fresh.figures().get(name)
        if new is None or old.source not in ("probed", "measured"):
            continue
        if (old.value < new.value) if name == "fma_latency" else (old.value > new.value):
            better[name] = dataclasses.replace(old, when=new.when, provisional=new.provisional)
    return fresh.with_figures(better)


def heal(model: MachineModel, target, *, flops: float, nbytes: float, dtype: str,
         seconds: float, label: str) -> MachineModel:  # fmt: skip
    """A kernel (``label``: ``flops`` FLOPs of ``dtype`` over ``nbytes`` compulsory bytes) ran
    in ``seconds``, under ``model``'s roofline: the roof it beat is raised to what it ran (the
    compute peaks by the same factor, or the bandwidth of the level its bytes fit in), marked
    ``measured`` and provisional (the next process re-probes). Persisted in this host's cache
    when ``model`` is that cache's; one warning line per cache and process. Returns the raised
    model."""
    raised: dict[str, Figure] = {}
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    note = f"{label} ran {seconds:.3g} s"
    scale = flops / model.peak(dtype) / seconds if flops else 0.0
    ceiling = fp32_peak_ceiling(model.cpu, model.cores, model.vector_lanes)
    if scale > 1.0 and model.peak("float32") * scale > ceiling:
        # Past what the hardware can do at its top clock: the FLOPs were miscounted, no proof.
        log.warning("%s: %.3g FLOPs in %.3g s is past the fp32 ceiling of %s x %d cores "
                    "(%.3g FLOP/s); the count is wrong, the model is not raised",
                    label, flops, seconds, model.cpu, model.cores, ceiling)  # fmt: skip
        scale = 0.0
    if scale > 1.0:
        for key, figure in model.peaks.items():
            raised[f"peak.{key}"] = Figure(figure.value * scale, "measured", note, now, True)
    level = model.memory_level(nbytes)
    if level in LEVELS and nbytes / model.bandwidth[level].value > seconds:
        raised[f"bw.{level}"] = Figure(nbytes / seconds, "measured", note, now, True)
    if not raised:
        return model
    healed = model.with_figures(raised)
    target = as_target(target)
    path = cache_path(target)
    persisted = False
    if path.exists():
        try:
            cached = MachineModel.from_json(json.loads(path.read_text()))
        except (ValueError, KeyError, TypeError):
            cached = None
        own = cached is not None and (cached.cpu, cached.cores) == (model.cpu, model.cores)
        if own and not any(f.source == "user" for f in model.figures().values()):
            better = {n: f for n, f in raised.items() if f.value > cached.figures()[n].value}
            if better:
                atomic_write(path, json.dumps(cached.with_figures(better).to_json(), indent=2))
            persisted = True
    if persisted:
        _PENDING.add(str(path))  # this process's next ask for the model probes it again
    key = (str(path), tuple(sorted((n, f.value) for n, f in model.figures().items())))
    if key not in _HEALED:  # one line per model a process measures with (a tune's: one)
        _HEALED.add(key)
        roof = model.roofline_seconds(flops, nbytes, dtype) / seconds
        where = {"l2": "L2", "llc": "the LLC", "dram": "no cache (DRAM)"}[level]
        bound = "its compute peak" if level == "l2" else f"compute or {level.upper()} bandwidth"
        raised_text = ", ".join(f"{n} {model.figures()[n].value:.3g} -> {f.value:.3g}"
                                for n, f in raised.items()
                                if n in ("peak.float32", "bw.llc", "bw.dram"))  # fmt: skip
        log.warning(
            "%s ran at %.2fx the machine model's roofline (its %.3g MB fit in %s: the roof is "
            "%s): the model read low; raised %s%s",
            label,
            roof,
            nbytes / 1e6,
            where,
            bound,
            raised_text,
            f" in {path} (probed again at the next tune)" if persisted else "",
        )
    return healed
