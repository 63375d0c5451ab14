"""Replay a frozen tuning log: no search, provenance checked, parity re-checked, re-measured."""

from __future__ import annotations

import difflib
import json
import pathlib
import warnings
from dataclasses import dataclass
from typing import Mapping

from tvm_ext.base import tvm_api
from tvm_ext.base.errors import (
    CorruptLog,
    LogError,
    LogVersionWarning,
    NoLogFound,
    OtherCPUWarning,
    TargetMismatch,
    WorkloadMismatch,
)
from tvm_ext.hardware.target import as_target
from tvm_ext.kernel_tuner.portability import portability, runnable_here
from tvm_ext.measurement.measure import Measurement, measure
from tvm_ext.records.logs import (
    MANIFEST_FILE,
    RECORDS_FILE,
    apply_trace,
    best_record,
    cpu_model,
    find_logs,
    log_folder,
    read_manifest,
    read_workload,
    structural_hash,
    target_key,
    uses_tensorize,
    workload_key,
)
from tvm_ext.schedules import register_cuda_intrinsics, register_x86_intrinsics
from tvm_ext.workloads.kernels import SUITE, Workload, from_func


@dataclass(frozen=True)
class ReplayResult:
    """The replayed module, its fresh measurement, and the manifest's recorded figures."""

    mod: "tvm_api.IRModule"
    measurement: Measurement
    recorded: Mapping[str, object]
    folder: pathlib.Path
    trace: str
    same_machine: bool = True  # False: the recorded times come from another CPU (warned)


def _workload_of_manifest(manifest: dict, folder: pathlib.Path) -> Workload:
    spec = manifest.get("workload")
    if not spec or spec.get("kernel") not in SUITE:
        raise WorkloadMismatch(
            f"{folder / 'manifest.json'} names no suite workload; replay it "
            "with the PrimFunc it was tuned from"
        )
    return SUITE[spec["kernel"]](**spec["args"])


def _log_folder_at(path: pathlib.Path) -> pathlib.Path:
    """``path`` when it is a log folder, else a :class:`NoLogFound` saying what it is."""
    if (path / MANIFEST_FILE).exists():
        return path
    if not path.exists():
        raise NoLogFound(f"{path}: no such folder; pass a log folder <root>/<target>/<workload>")
    logs = list(find_logs(path)) or sorted(p.parent for p in path.glob(f"*/{MANIFEST_FILE}"))
    if logs:
        raise NoLogFound(
            f"{path} holds {len(logs)} logs, not one: pass one log folder, e.g. {logs[0]} "
            f"(`tvm-ext report {logs[0].parent.parent}` lists them)"
        )
    raise NoLogFound(f"{path} is not a tuning log: it has no {MANIFEST_FILE}")


def _resolve(obj, target, log_dir):
    """(folder, func, workload) for a Workload, IRModule/PrimFunc, or a log folder path."""
    if isinstance(obj, (str, pathlib.Path)):
        folder = _log_folder_at(pathlib.Path(obj))
        workload = _workload_of_manifest(read_manifest(folder), folder)
        return folder, workload.func, workload
    if isinstance(obj, Workload):
        func, workload = obj.func, obj
    else:
        func = tvm_api.main_func(tvm_api.as_module(obj))
        workload = from_func(func)
    folder = log_folder(log_dir, target, func)
    if not (folder / "manifest.json").exists():
        others = sorted(
            p.parent.name
            for p in pathlib.Path(log_dir).glob(f"*/{workload_key(func)}/manifest.json")
        )
        hint = (
            (
                f"; logs for this workload exist for {others} (pass target= or "
                "allow_other_target=True)"
            )
            if others
            else "; tune it with log_dir= first"
        )
        raise NoLogFound(
            f"no log for {workload_key(func)} on {target_key(target)} under {log_dir}{hint}"
        )
    return folder, func, workload


def _check_workload(manifest: dict, func, folder: pathlib.Path) -> None:
    if manifest.get("structural_hash") == structural_hash(func):
        return
    want = json.dumps(manifest.get("workload"), indent=1, sort_keys=True).splitlines()
    have_w = from_func(func)
    have = json.dumps(
        {"kernel": have_w.name, "args": have_w.args} if have_w else None, indent=1, sort_keys=True
    ).splitlines()
    diff = "\n".join(difflib.unified_diff(want, have, "log", "yours", lineterm="", n=0))
    raise WorkloadMismatch(
        f"{folder} was tuned for a different workload (structural hash "
        f"{manifest.get('structural_hash')} vs {structural_hash(func)}):\n"
        f"{diff or '(same kernel arguments: the TIR itself differs)'}"
    )


def _check_target(manifest: dict, sch, target, folder, allow_other_target: bool):
    """Whether the log's schedule replays for ``target`` (see
    :mod:`tvm_ext.kernel_tuner.portability`): a :class:`TargetMismatch` naming what is missing,
    unless ``allow_other_target``."""
    missing_here = runnable_here(target)
    if missing_here:
        raise TargetMismatch(
            f"this host cannot run code built for {target_key(target)}: its CPU lacks "
            f"{', '.join(missing_here)}; replay with this host's target (target=None)"
        )
    verdict = portability(manifest, sch, target)
    if verdict.replays:
        return verdict
    message = (
        f"{folder} (tuned on {manifest.get('target_key')}) does not replay on "
        f"{target_key(target)}: {verdict.reason}"
    )
    if not allow_other_target:
        raise TargetMismatch(
            message
            + ". Pass allow_other_target=True (tvm-ext replay --allow-other-target) to replay it "
            "anyway (built for this target; its recorded times will not transfer), or tune here."
        )
    warnings.warn(message + "; replaying anyway (allow_other_target=True)", stacklevel=3)
    return verdict


def _warn_other_cpu(folder, manifest: dict, m: Measurement, target) -> None:
    """Recorded and replayed figures side by side, for a log timed on another CPU."""
    rec_s, rec_g = manifest.get("best_seconds"), manifest.get("best_gflops")
    recorded = f"{rec_s * 1e3:.4g} ms" if isinstance(rec_s, (int, float)) else "no time"
    recorded += f", {rec_g:.4g} GFLOP/s" if isinstance(rec_g, (int, float)) else ""
    replayed = f"{m.seconds * 1e3:.4g} ms" + (f", {m.gflops:.4g} GFLOP/s" if m.gflops else "")
    warnings.warn(
        f"{folder} was timed on {manifest.get('target_key')} "
        f"({manifest.get('cpu_model') or 'unknown CPU'}); its recorded times come from that CPU "
        f"and do not transfer: recorded {recorded}; replayed here on {target_key(target)} "
        f"({cpu_model()}) {replayed}",
        OtherCPUWarning,
        stacklevel=3,
    )


def apply_logged_trace(func, trace_json):
    """:func:`~tvm_ext.records.logs.apply_trace`, with our tensorize intrinsics registered
    first when the trace names one."""
    if uses_tensorize(trace_json):
        register_x86_intrinsics()
        register_cuda_intrinsics()
    return apply_trace(func, trace_json)


def replay(
    obj,
    target=None,
    log_dir="tuning_logs",
    *,
    allow_other_target: bool = False,
    repeat: int = 10,
):
    """Apply the best record of a frozen log with no search, re-check parity, measure it.

    ``obj`` is a Workload, IRModule or PrimFunc (its log is found under ``log_dir`` by target
    and workload key), or the path of one log folder (the workload stored in the log). (A
    model is replayed task by task by :func:`~tvm_ext.model_pipeline.model_replay.replay_model`;
    ``tvm_ext.replay`` decides which.)

    A log tuned on another CPU replays when ``target``'s CPU has every ISA feature its
    schedule uses (:mod:`tvm_ext.kernel_tuner.portability`), built for ``target``, with an
    :class:`~tvm_ext.base.errors.OtherCPUWarning` showing the recorded and the replayed
    figures; it is refused with a :class:`~tvm_ext.base.errors.TargetMismatch` naming the
    missing features, or across target kinds, unless ``allow_other_target``.
    """
    target = as_target(target)
    folder, func, workload = _resolve(obj, target, log_dir)
    manifest = read_manifest(folder)
    _check_workload(manifest, func, folder)
    if manifest.get("tvm_version") != tvm_api.TVM_VERSION:
        warnings.warn(
            f"{folder} was written by TVM {manifest.get('tvm_version')}, this is "
            f"{tvm_api.TVM_VERSION}; parity is re-checked",
            LogVersionWarning,
            stacklevel=2,
        )
    trace_json = logged_trace(folder, manifest)
    sch = _apply(func, trace_json, folder)
    verdict = _check_target(manifest, sch, target, folder, allow_other_target)
    m = measure(sch, workload, target, reference=None if workload else func, repeat=repeat,
                weights_repacked_once=bool(manifest.get("weights_repacked_once")))  # fmt: skip
    if not verdict.same_machine:
        _warn_other_cpu(folder, manifest, m, target)
    keys = ("best_seconds", "best_gflops", "parity", "date", "cpu_model", "threads", "trials",
            "policy", "target_key", "peak_gflops", "measured_on")  # fmt: skip
    recorded = {k: manifest.get(k) for k in keys}
    return ReplayResult(sch.mod, m, recorded, folder, json.dumps(trace_json), verdict.same_machine)


def logged_trace(folder: pathlib.Path, manifest: dict):
    """The trace (JSON) of the record the log's manifest chose, else of its fastest record."""
    chosen = manifest.get("best_record")
    if chosen is not None and (isinstance(chosen, bool) or not isinstance(chosen, int)):
        raise CorruptLog(f"{folder / MANIFEST_FILE}: best_record={chosen!r} is not a line number")
    read_workload(folder)
    return best_record(folder, chosen).trace_json


def _apply(func, trace_json, folder: pathlib.Path):
    try:
        return apply_logged_trace(func, trace_json)
    # A damaged trace fails inside TVM (TVM 0.27's FFI raises Python's built-in error types:
    # RuntimeError, ValueError, ...) or as the error of whichever conversion met the wrong
    # type first.
    except (RuntimeError, TypeError, ValueError, IndexError, KeyError, AttributeError) as err:
        raise CorruptLog(
            f"{folder / RECORDS_FILE}: the best record does not apply to this "
            f"workload ({str(err).splitlines()[0]})"
        ) from err


def replays_here(folder, target=None) -> str:
    """Whether the log in ``folder`` replays for ``target`` (default this host), in a few
    words: ``yes``, ``yes (times from ...)`` or ``no: <why>`` (for reports)."""
    folder = pathlib.Path(folder)
    try:
        target = as_target(target)
        manifest = read_manifest(folder)
        workload = _workload_of_manifest(manifest, folder)
        sch = _apply(workload.func, logged_trace(folder, manifest), folder)
    except LogError as err:
        return f"no: {str(err).splitlines()[0]}"
    missing_here = runnable_here(target)
    if missing_here:
        return f"no: this host lacks {', '.join(missing_here)}"
    return portability(manifest, sch, target).summary
