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
    LogVersionWarning,
    NoLogFound,
    TargetMismatch,
    WorkloadMismatch,
)
from tvm_ext.facts.kernels import SUITE, Workload, from_func
from tvm_ext.facts.measure import Measurement, measure
from tvm_ext.facts.target import as_target
from tvm_ext.records.logs import (
    MANIFEST_FILE,
    RECORDS_FILE,
    WORKLOADS_FILE,
    apply_trace,
    best_record,
    cpu_model,
    log_folder,
    read_json_lines,
    read_manifest,
    structural_hash,
    target_key,
    uses_tensorize,
    workload_key,
)
from tvm_ext.schedules import register_cuda_intrinsics, register_x86_intrinsics


@dataclass(frozen=True)
class ReplayResult:
    """The replayed module, its fresh measurement, and the manifest's recorded figures."""

    mod: "tvm_api.IRModule"
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


def apply_logged_trace(func, trace_json):
    """:func:`~tvm_ext.records.logs.apply_trace`, with our tensorize intrinsics registered
    first when the trace names one."""
    if uses_tensorize(trace_json):
        register_x86_intrinsics()
        register_cuda_intrinsics()
    return apply_trace(func, trace_json)


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
    if manifest.get("tvm_version") != tvm_api.TVM_VERSION:
        warnings.warn(
            f"{folder} was written by TVM {manifest.get('tvm_version')}, this is "
            f"{tvm_api.TVM_VERSION}; parity is re-checked",
            LogVersionWarning,
            stacklevel=2,
        )
    chosen = manifest.get("best_record")
    if chosen is not None and (isinstance(chosen, bool) or not isinstance(chosen, int)):
        raise CorruptLog(f"{folder / MANIFEST_FILE}: best_record={chosen!r} is not a line number")
    workloads = read_json_lines(folder / WORKLOADS_FILE)
    if len(workloads) != 1:
        raise CorruptLog(
            f"{folder / WORKLOADS_FILE}: expected one workload, found {len(workloads)}"
        )
    trace_json = best_record(folder, chosen).trace_json
    try:
        sch = apply_logged_trace(func, trace_json)
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
