"""Where a machine model comes from: probed once per CPU model and core count
(:mod:`tvm_ext.hardware.machine_probes`), then read from the user cache directory
(``tvm-ext info --reprobe`` measures again), with the user's overrides on top. The model itself
is :class:`~tvm_ext.hardware.machine_model.MachineModel`.
"""

from __future__ import annotations

import json
import logging
import pathlib

from tvm_ext.base.files import atomic_write, cache_dir
from tvm_ext.hardware.device import Tracker
from tvm_ext.hardware.machine_model import MachineModel
from tvm_ext.hardware.machine_probes import probe, probe_device
from tvm_ext.hardware.target import as_target, target_cores, target_cpu

log = logging.getLogger(__name__)


def device_machine(target, tracker: Tracker, *, reprobe: bool = False) -> MachineModel:
    """The model of the devices under ``tracker.key`` (one device kind): probed there once,
    then read from the user cache directory."""
    target = as_target(target)
    name = f"machine-{target_cpu(target)}-{target_cores(target)}c-rpc-{tracker.key}.json"
    path = cache_path(target).parent / name  # beside this host's model
    return _cached(path, reprobe, lambda: probe_device(target, tracker))


def _cached(path: pathlib.Path, reprobe: bool, make) -> MachineModel:
    model = None
    if path.exists() and not reprobe:
        try:
            model = MachineModel.from_json(json.loads(path.read_text()))
        except (ValueError, KeyError, TypeError) as err:
            log.warning("ignoring unreadable machine cache %s (%s); probing again", path, err)
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


def host_machine(
    target=None, *, reprobe: bool = False, overrides: dict | None = None
) -> MachineModel:
    """The machine model of ``target`` (default the host): cached probe, then ``overrides``."""
    target = as_target(target)
    model = _cached(cache_path(target), reprobe, lambda: probe(target))
    return model.with_overrides(overrides) if overrides else model
