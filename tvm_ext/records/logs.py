"""Frozen tuning logs: MetaSchedule's JSON database plus a provenance manifest.

Layout: ``<root>/<target key>/<workload key>/`` holding ``database_workload.json`` (one
workload), ``database_tuning_record.json`` (one measured candidate per line) and
``manifest.json``. Every file is replaced atomically (written beside, then renamed), under a
file lock, so an interrupted or concurrent tune never leaves a torn log and never loses a
record that was already there.
"""

from __future__ import annotations

import datetime
import json
import math
import pathlib
import platform
import tempfile
from dataclasses import dataclass
from importlib.metadata import version
from typing import Iterable

from filelock import FileLock

from tvm_ext.base import tvm_api
from tvm_ext.base.errors import CorruptLog
from tvm_ext.base.files import atomic_write
from tvm_ext.workloads.kernels import Workload, from_func

WORKLOADS_FILE = "database_workload.json"
RECORDS_FILE = "database_tuning_record.json"
MANIFEST_FILE = "manifest.json"
MANIFEST_SCHEMA = 1
# MetaSchedule records a failed build or run as 1e10 s; any mean at or above this is a failure.
FAILED_SECONDS = 1e9


@dataclass(frozen=True)
class Record:
    """One line of a records file: ``[workload index, [trace, run seconds, target, args]]``."""

    line: int  # 1-based line number in the records file
    row: list  # the parsed line, as MetaSchedule wrote it
    trace_json: object
    seconds: float | None  # mean of the runs; None for a failed build or run

    @property
    def failed(self) -> bool:
        return self.seconds is None


def run_seconds(run_secs) -> float | None:
    """The mean of a record's run times, or None when the build or run failed."""
    values = [float(s) for s in run_secs or ()]
    if not values or any(not math.isfinite(v) or v >= FAILED_SECONDS for v in values):
        return None
    return sum(values) / len(values)


def cpu_model() -> str:
    """The CPU model string the kernel reports (provenance of every figure)."""
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def target_key(target) -> str:
    """``llvm-znver4-2c`` or ``cuda-sm_90``: one folder per code-generation target."""
    attrs = target.attrs
    if target.kind.name == "cuda":
        return f"cuda-{attrs.get('arch', 'unknown')}"
    return f"llvm-{attrs.get('mcpu', 'generic')}-{int(attrs['num-cores'])}c"


def structural_hash(func) -> str:
    return f"{tvm_api.tvm_ffi.structural_hash(func) & (2**64 - 1):016x}"


def workload_key(func) -> str:
    """The suite key when ``func`` is a suite kernel, else ``prim_func-<structural hash>``."""
    w = from_func(func)
    return w.key if w is not None else f"prim_func-{structural_hash(func)}"


def log_folder(root, target, func) -> pathlib.Path:
    return pathlib.Path(root) / target_key(target) / workload_key(func)


def read_json_lines(path: pathlib.Path) -> list:
    """Parse a JSON-lines file; a bad line is a CorruptLog naming the file and line."""
    rows = []
    try:
        text = path.read_text()
    except OSError as err:
        raise CorruptLog(f"cannot read {path}: {err}") from err
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as err:
            raise CorruptLog(
                f"{path}, line {number}: not JSON ({err.msg}); delete the line or "
                "the log and tune again"
            ) from err
    return rows


def read_json(path: pathlib.Path):
    """The JSON at ``path``; CorruptLog naming the file when it is unreadable or not JSON."""
    try:
        return json.loads(path.read_text())
    except OSError as err:
        raise CorruptLog(f"{path} is missing or unreadable: {err}") from err
    except json.JSONDecodeError as err:
        raise CorruptLog(f"{path}, line {err.lineno}: not JSON ({err.msg})") from err


def read_manifest(folder: pathlib.Path) -> dict:
    path = folder / MANIFEST_FILE
    data = read_json(path)
    if not isinstance(data, dict) or data.get("schema") != MANIFEST_SCHEMA:
        raise CorruptLog(
            f"{path}: manifest schema {data.get('schema') if isinstance(data, dict) else None!r},"
            f" expected {MANIFEST_SCHEMA}"
        )
    return data


def read_records(folder: pathlib.Path) -> list[Record]:
    """Every record of the records file in ``folder`` (a log folder or a MetaSchedule work dir),
    in measurement order; none when there is no file. A line that is not a tuning record is a
    CorruptLog naming the file and line."""
    path = pathlib.Path(folder) / RECORDS_FILE
    if not path.exists():
        return []
    records = []
    for number, row in enumerate(read_json_lines(path), 1):
        try:
            if not (isinstance(row, list) and len(row) == 2 and isinstance(row[1], list)):
                raise TypeError("expected [workload index, [trace, run seconds, ...]]")
            trace_json, secs = row[1][0], row[1][1]
            if not isinstance(secs, list) or not secs:
                raise TypeError(f"run seconds {secs!r} is not a non-empty list")
            seconds = run_seconds(secs)
        except (TypeError, IndexError, ValueError) as err:
            raise CorruptLog(
                f"{path}, line {number}: not a tuning record ({type(err).__name__}: {err})"
            ) from err
        records.append(Record(number, row, trace_json, seconds))
    return records


def best_record(folder: pathlib.Path, chosen: int | None = None) -> Record:
    """The record a tune chose (line ``chosen``, from the manifest's ``best_record``), else
    the fastest successful one."""
    records = read_records(folder)
    if chosen is not None:
        if not 1 <= chosen <= len(records):
            raise CorruptLog(
                f"{folder / MANIFEST_FILE}: best_record {chosen} is past the last record of "
                f"{folder / RECORDS_FILE}"
            )
        if records[chosen - 1].failed:
            raise CorruptLog(f"{folder / MANIFEST_FILE}: best_record {chosen} is a failed run")
        return records[chosen - 1]
    ok = [r for r in records if not r.failed]
    if not ok:
        raise CorruptLog(f"{folder / RECORDS_FILE} holds no successful record")
    return min(ok, key=lambda r: r.seconds)


def uses_tensorize(trace_json) -> bool:
    """Whether a trace (as JSON) has a Tensorize instruction (spelled ``"Tensorize"`` there)."""
    return '"tensorize"' in json.dumps(trace_json, default=str).lower()


def apply_trace(func, trace) -> "tvm_api.Schedule":
    """A fresh Schedule of a deep copy of ``func`` (PrimFunc or IRModule) with a recorded
    trace applied, post-processing included (a trace records the post-processors' steps after
    ``EnterPostproc``), so the schedule is the one that was built and measured. ``trace`` is a
    ``Trace`` or its JSON. A tensorized trace needs its intrinsics registered first."""
    sch = tvm_api.Schedule(tvm_api.deep_copy(tvm_api.as_module(func)))
    if isinstance(trace, tvm_api.s_tir.schedule.Trace):
        trace.apply_to_schedule(sch, remove_postproc=False)
    else:
        tvm_api.s_tir.schedule.Trace.apply_json_to_schedule(trace, sch)
    return sch


def _record_lines(folder: pathlib.Path) -> list[str]:
    """The records of ``folder`` as lines for a one-workload log (workload index 0)."""
    return [json.dumps([0, record.row[1]]) for record in read_records(folder)]


def merge_into_log(
    folder: pathlib.Path,
    work_dir: pathlib.Path,
    manifest: dict,
    best_is_first_new: bool = False,
    failed=(),
) -> None:
    """Add the records of a tuning work dir to the log ``folder`` (created if needed).

    ``best_is_first_new``: the tune chose its first new record (the hand schedule, seeded
    before the search) over the fastest recorded one (after timing both side by side); the
    manifest's ``best_record`` then names its line, so a replay applies what the tune returned.
    Without it, the best record is the one with the lowest mean time. ``failed``: traces (as
    JSON) whose records failed a parity check; their lines, old and new, are kept as failed
    runs (:data:`FAILED_SECONDS`), so no replay or later tune takes them.
    """
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder / ".lock")):
        workload_rows = read_json_lines(work_dir / WORKLOADS_FILE)
        if len(workload_rows) != 1:
            raise CorruptLog(
                f"{work_dir / WORKLOADS_FILE}: expected one workload, found {len(workload_rows)}"
            )
        wrong = {_trace_key(trace) for trace in failed}
        old = _marked(_record_lines(folder), wrong)
        seen = set(old)
        new = [line for line in _marked(_record_lines(work_dir), wrong) if line not in seen]
        atomic_write(folder / WORKLOADS_FILE, json.dumps(workload_rows[0]) + "\n")
        atomic_write(folder / RECORDS_FILE, "".join(line + "\n" for line in old + new))
        previous = read_manifest(folder) if (folder / MANIFEST_FILE).exists() else {}
        manifest = dict(manifest)
        manifest["best_record"] = len(old) + 1 if best_is_first_new and new else None
        if previous:
            manifest["tunes"] = previous.get("tunes", 1) + 1
            # The figures are this tune's, measured and parity-checked now (its selection
            # re-timed the fastest record, old ones included): an earlier tune's smaller
            # time is no fact about today. Only a tune stopped before that check keeps the
            # earlier, checked figures it cannot vouch for itself.
            unchecked = (manifest.get("parity") or {}).get("ok") is not True
            checked_before = (previous.get("parity") or {}).get("ok") is True
            if unchecked and checked_before:
                for key in ("best_seconds", "best_gflops", "parity", "binding"):
                    manifest[key] = previous[key]
                for key in ("peak_gflops", "measured_on"):  # absent from older manifests
                    manifest[key] = previous.get(key)
                manifest["best_record"] = previous.get("best_record")
        manifest["records"] = len(old) + len(new)
        atomic_write(folder / MANIFEST_FILE, json.dumps(manifest, indent=2, sort_keys=True))


def _trace_key(trace_json) -> str:
    """A trace's JSON as one string, whoever wrote it (MetaSchedule's files write a flag as
    ``1`` where ``TuningRecord.as_json`` gives ``True``)."""

    def plain(value):
        if isinstance(value, bool):
            return int(value)
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        return value

    return json.dumps(plain(trace_json), sort_keys=True)


def _marked(lines: list[str], wrong: set[str]) -> list[str]:
    """``lines`` with the run times of the records whose trace is in ``wrong`` set to failed."""
    if not wrong:
        return lines
    out = []
    for line in lines:
        row = json.loads(line)
        if _trace_key(row[1][0]) in wrong:
            row[1][1] = [FAILED_SECONDS]
            line = json.dumps(row)
        out.append(line)
    return out


def add_record(folder, mod, func, trace, seconds: float, target, manifest: dict) -> bool:
    """Add one schedule (its ``trace``, measured at ``seconds``) to the log ``folder`` as a
    record, its first new one (so ``manifest``, made by :func:`make_manifest`, names it best),
    unless the log already holds that trace. True when it was added."""
    ms = tvm_api.ms
    with tempfile.TemporaryDirectory(prefix="tvm-ext-record-") as work:
        database = ms.database.JSONDatabase(work_dir=work)
        record = ms.database.TuningRecord(
            trace,
            database.commit_workload(mod),
            [seconds],
            target,
            ms.arg_info.ArgInfo.from_prim_func(func),
        )
        database.commit_tuning_record(record)
        del database  # its files are complete once committed
        (new,) = read_records(pathlib.Path(work))
        if holds_trace(folder, new.trace_json):
            return False
        merge_into_log(pathlib.Path(folder), pathlib.Path(work), manifest, best_is_first_new=True)
    return True


def holds_trace(folder, trace_json) -> bool:
    """Whether the log ``folder`` (possibly not yet written) holds a record of that trace."""
    folder = pathlib.Path(folder)
    if not (folder / MANIFEST_FILE).exists():
        return False
    want = _trace_key(trace_json)
    return any(_trace_key(r.trace_json) == want for r in read_records(folder))


def make_manifest(
    func,
    target,
    *,
    threads: int,
    policy: str,
    stats: dict,
    seconds: float,
    gflops: float | None,
    max_rel_error: float,
    workload: Workload | None,
    machine=None,
    measured_on: str | None = None,
) -> dict:
    """Everything that decides whether a log may be replayed, and what it recorded: with
    ``machine`` (the model the tune bounded with), the compute peak its figures are a
    fraction of; ``measured_on`` says where the times were taken."""
    dtype = workload.dtype if workload is not None else None
    peak = None
    if machine is not None and dtype is not None:
        try:
            peak = machine.peak(dtype)
        except ValueError:  # a dtype the model has no peak for: no fraction to give
            peak = None
    return {
        "schema": MANIFEST_SCHEMA,
        "package_version": version("tvm-ext"),
        "tvm_version": tvm_api.TVM_VERSION,
        "tvm_ffi_version": version("apache-tvm-ffi"),
        "target": json.loads(tvm_api.json_of_target(target)),
        "target_key": target_key(target),
        "cpu_model": cpu_model() if target.kind.name == "llvm" else None,
        "threads": threads,
        "workload_key": workload_key(func),
        "workload": {"kernel": workload.name, "args": workload.args} if workload else None,
        "structural_hash": structural_hash(func),
        "policy": policy,
        "trials": {
            k: stats.get(k)
            for k in (
                "generated",
                "dropped",
                "dropped_stage1",
                "dropped_stage2",
                "measured",
                "regrets",
            )  # fmt: skip
        },
        # Each candidate the cut dropped: stage (1 before build, 2 after), bound, binding arm.
        "dropped_candidates": list(stats.get("dropped_records") or []),
        "best_seconds": seconds,
        "best_gflops": gflops,
        "parity": {"max_rel_error": max_rel_error, "ok": True},
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "tunes": 1,
        "peak_gflops": peak / 1e9 if peak is not None else None,
        "measured_on": measured_on,
    }


def find_logs(root) -> Iterable[pathlib.Path]:
    """Every log folder (one holding a manifest) under ``root``."""
    return sorted(p.parent for p in pathlib.Path(root).glob(f"*/*/{MANIFEST_FILE}"))


def read_workload(folder):
    """The log's one MetaSchedule workload entry (``database_workload.json``), decoded; a
    CorruptLog naming the file when it holds anything else (a tune seeded from the log hands
    the file to MetaSchedule's JSONDatabase)."""
    path = pathlib.Path(folder) / WORKLOADS_FILE
    rows = read_json_lines(path)
    if len(rows) != 1:
        raise CorruptLog(f"{path}: expected one workload, found {len(rows)}")
    try:
        return tvm_api.meta_schedule().database.Workload.from_json(rows[0])
    # TVM's FFI raises built-in error types (its InternalError is a RuntimeError).
    except (RuntimeError, TypeError, ValueError) as err:
        raise CorruptLog(
            f"{path}: not a MetaSchedule workload entry ({str(err).splitlines()[0][:120]})"
        ) from err
