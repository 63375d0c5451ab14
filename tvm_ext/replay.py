"""Replay a frozen tuning log: no search, provenance checked, parity re-checked, re-measured."""

from __future__ import annotations

import difflib
import json
import pathlib
import warnings
from dataclasses import dataclass
from typing import Mapping

from . import _tvm
from ._callable_module import make_callable
from .errors import CorruptLog, LogVersionWarning, NoLogFound, TargetMismatch, WorkloadMismatch
from .kernels import SUITE, Workload, from_func
from .logs import (
    MANIFEST_FILE,
    RECORDS_FILE,
    WORKLOADS_FILE,
    cpu_model,
    log_folder,
    read_json_lines,
    read_manifest,
    structural_hash,
    target_key,
    workload_key,
)
from .measure import Measurement, measure
from .target import as_target


@dataclass(frozen=True)
class ReplayResult:
    """The replayed module, its fresh measurement, and the manifest's recorded figures."""

    mod: "_tvm.IRModule"
    measurement: Measurement
    recorded: Mapping[str, object]
    folder: pathlib.Path
    trace: str


def _workload_of_manifest(manifest: dict, folder: pathlib.Path) -> Workload:
    spec = manifest.get("workload")
    if not spec or spec.get("kernel") not in SUITE:
        raise WorkloadMismatch(
            f"{folder / 'manifest.json'} names no suite workload; replay it "
            "with the PrimFunc it was tuned from"
        )
    return SUITE[spec["kernel"]](**spec["args"])


def _resolve(obj, target, log_dir):
    """(folder, func, workload) for a Workload, IRModule/PrimFunc, or a log folder path."""
    if isinstance(obj, (str, pathlib.Path)) and (pathlib.Path(obj) / "manifest.json").exists():
        folder = pathlib.Path(obj)
        workload = _workload_of_manifest(read_manifest(folder), folder)
        return folder, workload.func, workload
    if isinstance(obj, Workload):
        func, workload = obj.func, obj
    else:
        func = _tvm.main_func(_tvm.as_module(obj))
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


def _check_target(manifest: dict, target, folder: pathlib.Path, allow_other_target: bool) -> None:
    recorded_cpu, here = manifest.get("cpu_model"), cpu_model()
    problems = []
    if manifest.get("target_key") != target_key(target):
        problems.append(f"target {manifest.get('target_key')} vs {target_key(target)}")
    if target.kind.name == "llvm" and recorded_cpu and recorded_cpu != here:
        problems.append(f"CPU {recorded_cpu!r} vs {here!r}")
    if not problems:
        return
    message = f"{folder} was tuned elsewhere: " + "; ".join(problems)
    if not allow_other_target:
        raise TargetMismatch(
            message + ". Pass allow_other_target=True to replay it anyway "
            "(its times will not transfer), or tune here."
        )
    warnings.warn(message + "; replaying anyway (allow_other_target=True)", stacklevel=3)


def _best_trace(folder: pathlib.Path, func, chosen: int | None = None):
    """The trace of the record the tune chose (line ``chosen`` of the records, from the
    manifest's ``best_record``), else of the fastest valid record."""
    workloads = read_json_lines(folder / WORKLOADS_FILE)
    if len(workloads) != 1:
        raise CorruptLog(
            f"{folder / WORKLOADS_FILE}: expected one workload, found {len(workloads)}"
        )
    best, best_secs = None, float("inf")
    for number, row in enumerate(read_json_lines(folder / RECORDS_FILE), 1):
        try:
            if not (isinstance(row, list) and len(row) == 2 and isinstance(row[1], list)):
                raise TypeError("expected [workload index, [trace, run seconds, ...]]")
            trace_json, secs = row[1][0], row[1][1]
            mean = sum(float(s) for s in secs) / len(secs)
        except (TypeError, IndexError, KeyError, ValueError, ZeroDivisionError) as err:
            raise CorruptLog(
                f"{folder / RECORDS_FILE}, line {number}: not a tuning record "
                f"({type(err).__name__}: {err})"
            ) from err
        if number == chosen:
            if mean >= 1e9:
                raise CorruptLog(f"{folder / MANIFEST_FILE}: best_record {chosen} is a failed run")
            return trace_json, mean
        if mean < best_secs and mean < 1e9:
            best, best_secs = trace_json, mean
    if chosen is not None:
        raise CorruptLog(
            f"{folder / MANIFEST_FILE}: best_record {chosen} is past the last record of "
            f"{folder / RECORDS_FILE}"
        )
    if best is None:
        raise CorruptLog(f"{folder / RECORDS_FILE} holds no successful record")
    return best, best_secs


def uses_tensorize(trace_json) -> bool:
    """Whether a trace (as JSON) has a Tensorize instruction (spelled ``"Tensorize"`` there)."""
    return '"tensorize"' in json.dumps(trace_json, default=str).lower()


def apply_trace(func, trace_json):
    """A fresh Schedule of a deep copy of ``func`` with a recorded trace applied (a copy: a
    trace replayed onto a module an earlier replay still references crashes TVM 0.27)."""
    from tvm_ext.schedules import register_cuda_intrinsics, register_x86_intrinsics

    if uses_tensorize(trace_json):  # our intrinsics must exist before the trace names them
        register_x86_intrinsics()
        register_cuda_intrinsics()
    mod = _tvm.tvm.ir.load_json(_tvm.tvm.ir.save_json(_tvm.as_module(func)))
    sch = _tvm.Schedule(mod)
    _tvm.tvm.s_tir.schedule.Trace.apply_json_to_schedule(trace_json, sch)
    return sch


def replay(
    obj, target=None, log_dir="tuning_logs", *, allow_other_target: bool = False, repeat: int = 10
) -> ReplayResult:
    """Apply the best record of a frozen log with no search, re-check parity, measure it.

    ``obj`` is a Workload, IRModule or PrimFunc (its log is found under ``log_dir`` by target
    and workload key), or the path of one log folder (the workload stored in the log).
    """
    target = as_target(target)
    folder, func, workload = _resolve(obj, target, log_dir)
    manifest = read_manifest(folder)
    _check_workload(manifest, func, folder)
    _check_target(manifest, target, folder, allow_other_target)
    if manifest.get("tvm_version") != _tvm.tvm.__version__:
        warnings.warn(
            f"{folder} was written by TVM {manifest.get('tvm_version')}, this is "
            f"{_tvm.tvm.__version__}; parity is re-checked",
            LogVersionWarning,
            stacklevel=2,
        )
    chosen = manifest.get("best_record")
    if chosen is not None and (isinstance(chosen, bool) or not isinstance(chosen, int)):
        raise CorruptLog(f"{folder / MANIFEST_FILE}: best_record={chosen!r} is not a line number")
    trace_json, _ = _best_trace(folder, func, chosen)
    try:
        sch = apply_trace(func, trace_json)
    # A damaged trace fails inside TVM (TVM 0.27's FFI raises Python's built-in error types:
    # RuntimeError, ValueError, ...) or as the error of whichever conversion met the wrong
    # type first.
    except (
        RuntimeError,
        TypeError,
        ValueError,
        IndexError,
        KeyError,
        AttributeError,
    ) as err:
        raise CorruptLog(
            f"{folder / RECORDS_FILE}: the best record does not apply to this "
            f"workload ({str(err).splitlines()[0]})"
        ) from err
    m = measure(sch, workload, target, reference=None if workload else func, repeat=repeat)
    recorded = {
        k: manifest.get(k)
        for k in (
            "best_seconds",
            "best_gflops",
            "parity",
            "date",
            "cpu_model",
            "threads",
            "trials",
            "policy",
        )
    }
    return ReplayResult(sch.mod, m, recorded, folder, json.dumps(trace_json))


make_callable(__name__, "replay")  # tvm_ext.replay(obj, target) calls replay()
