"""Training data for calibrated and learned policies: one row per candidate of frozen logs.

:func:`dataset` reads tuning logs (the folders :mod:`tvm_ext.records.logs` writes) and replays every
record's trace on its workload, then derives three groups of columns:

- identity and label: workload key, kernel kind, shape, dtype, target key, CPU model, the
  record's position in measurement order, ``seconds`` (mean of its runs) and ``status``;
- ``f_*``: our :class:`~tvm_ext.cost.CandidateFeatures` as numbers, ``rf_*``: the roofline
  policy's arms, bound and score, and ``features_json`` (the whole record, from which
  :class:`~tvm_ext.cost.ServicePolicy` recomputes its terms);
- ``ms_*``: MetaSchedule's ``PerStoreFeature`` matrix (one 164-wide row per buffer store)
  aggregated to a fixed width: mean and max over stores, and the store count.

A failed build or run is never given a time: those rows have ``status="failed"`` and
``seconds=NaN`` and are left out unless ``include_failed=True``. A record whose trace no
longer applies to its workload is ``status="unreplayable"`` (same treatment). The derived
columns are cached in the user cache directory (``features-<hash>.csv.gz``, keyed by the
records file and the feature version); a cache shipped beside a log (the frozen dataset's) is
read from there, and nothing is ever written into a log folder.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import pathlib
from typing import Iterable

from tqdm import tqdm
from tvm_ext.cost.features import features
from tvm_ext.cost.policy import evaluate
from tvm_ext.cost.roofline import RooflinePolicy

from tvm_ext.base import files, tvm_api
from tvm_ext.base.errors import CorruptLog, DatasetError, LogError
from tvm_ext.hardware.machine import host_machine
from tvm_ext.records.logs import (
    MANIFEST_FILE,
    RECORDS_FILE,
    apply_trace,
    find_logs,
    read_manifest,
    read_records,
    read_workload,
)
from tvm_ext.workloads.kernels import from_func

from .features import STORE_SUMMARY

# 2: the roofline of issue 16 (ISA ceilings, issue arm, chain from segments); 3: a chain inside
# the unroll reach is not charged its repeats; 4: nor is an issue run; 5: the issue arm reads
# through fused loops outside its run; 6: the phases arm, and long segments walked one by one;
# 7: explicit vectors narrower than a register are no cap (the backend may join them); 8: up to
# 16 loop copies side by side (MAX_LOCKSTEP), dtype pricing from the parameters, the target's
# FMA and reassociation facts, an unnamed CPU's ports widened at stage 1.
FEATURE_VERSION = 8
ROOFLINE_ARMS = ("compute", "memory.llc", "memory.dram", "dependency", "issue")
ID_COLUMNS = (
    "workload",
    "kernel",
    "shape",
    "dtype",
    "target",
    "cpu_model",
    "order",
    "seconds",
    "status",
)


def log_folders(log_dirs) -> list[pathlib.Path]:
    """Every log folder in ``log_dirs``: each entry is a log folder, a target folder of them,
    or a root of ``<target>/<workload>/`` folders."""
    if isinstance(log_dirs, (str, os.PathLike)):
        log_dirs = [log_dirs]
    folders: list[pathlib.Path] = []
    for entry in log_dirs:
        path = pathlib.Path(entry)
        if (path / MANIFEST_FILE).exists():
            folders.append(path)
            continue
        found = list(find_logs(path)) or sorted(p.parent for p in path.glob(f"*/{MANIFEST_FILE}"))
        if not found:
            raise LogError(f"{path}: no tuning log (no <target>/<workload>/{MANIFEST_FILE})")
        folders.extend(found)
    return folders


def numeric_features(feats, cost) -> dict:
    """Our candidate facts and the roofline's arms as plain numbers (NaN when unavailable)."""
    nan = float("nan")
    blocks = feats.blocks
    main = max(blocks, key=lambda b: b.unique_flops or 0) if blocks else None
    low, high = feats.bytes.get("dram") or (None, None)
    row = {
        "f_log_flops": math.log10(feats.flops) if feats.flops else nan,
        "f_log_bytes_lower": math.log10(low) if low else nan,
        "f_log_bytes_upper": math.log10(high) if high else nan,
        "f_parallel_extent": feats.parallel_extent if feats.parallel_extent else nan,
        "f_cores_used": feats.cores_used if feats.cores_used is not None else nan,
        "f_vector_lanes": feats.vector_lanes if feats.vector_lanes is not None else nan,
        "f_log_unroll": math.log2(feats.unroll) if feats.unroll else nan,
        "f_blocks": len(blocks),
        "f_recompute": (
            sum(b.instances for b in blocks) / max(sum(b.unique_instances for b in blocks), 1)
            if blocks
            else nan
        ),
        "f_main_lanes": main.explicit_lanes if main else nan,
        "f_main_possible_lanes": main.possible_lanes if main else nan,
        "f_main_cores_used": main.cores_used if main else nan,
        "f_main_log_reduction": math.log2(main.reduction_length) if main else nan,
        "f_main_log_independent": math.log2(max(main.independent_outputs, 1)) if main else nan,
        "f_tensorized": float(any(b.tensorized for b in blocks)),
    }
    row["rf_log_bound"] = math.log10(cost.lower_bound_s) if cost.lower_bound_s else nan
    row["rf_log_score"] = math.log10(cost.score_s) if cost.score_s else nan
    for arm in ROOFLINE_ARMS:
        value = cost.arms.get(arm)
        row[f"rf_log_{arm.replace('.', '_')}"] = math.log10(value) if value else nan
    row["rf_binding"] = cost.binding
    return row


def store_columns(summary) -> dict:
    return {f"ms_{name}": value for name, value in zip(STORE_SUMMARY, summary)}


def _cache_name(folder: pathlib.Path) -> str:
    digest = hashlib.sha256((folder / RECORDS_FILE).read_bytes())
    digest.update(f"v{FEATURE_VERSION}".encode())
    return f"features-{digest.hexdigest()[:12]}.csv.gz"


def cache_dir() -> pathlib.Path:
    """Where derived dataset columns are cached, never in a log: ``$TVM_EXT_CACHE_DIR`` when
    set (as for the machine model), else the user cache directory."""

    return files.cache_dir() / "features"


class ReplayedLog:
    """The records of one log folder, each replayed on its workload (post-processors run, as
    the search ran them before building): ``entries`` holds, in measurement order,
    ``(order, seconds or None, schedule or None, status)``."""

    def __init__(self, folder: pathlib.Path):

        ms = tvm_api.meta_schedule()
        self.folder = pathlib.Path(folder)
        self.manifest = read_manifest(self.folder)
        db_workload = read_workload(self.folder)
        try:
            self.target = tvm_api.Target(self.manifest["target"])
        except (KeyError, RuntimeError, TypeError, ValueError) as err:
            raise CorruptLog(f"{self.folder}: target does not parse: {err}") from err
        self.mod = db_workload.mod
        self.workload = from_func(tvm_api.main_func(self.mod))
        self.context = ms.TuneContext(
            mod=self.mod,
            target=self.target,
            space_generator=ms.space_generator.PostOrderApply(
                sch_rules=[], postprocs=self.target.kind.name, mutator_probs={}
            ),
        )
        self.args_info = ms.arg_info.ArgInfo.from_prim_func(tvm_api.main_func(self.mod))
        self.entries = []
        for record in read_records(self.folder):
            order = record.line - 1
            if record.failed:
                self.entries.append((order, None, None, "failed"))
                continue
            try:  # the schedule as built: a trace records its post-processing steps too
                sch = apply_trace(self.mod, record.trace_json)
            # A trace that no longer applies (TVM 0.27's FFI raises Python's built-in types)
            # is kept apart, never given a time.
            except (RuntimeError, ValueError, TypeError, IndexError, KeyError, AttributeError):
                self.entries.append((order, None, None, "unreplayable"))
                continue
            self.entries.append((order, record.seconds, sch, "ok"))

    def measure_candidates(self, orders=None) -> list:
        """MetaSchedule measure candidates of the replayed records (all, or ``orders``)."""
        ms = tvm_api.meta_schedule()
        by_order = {o: sch for o, _, sch, _ in self.entries if sch is not None}
        orders = sorted(by_order) if orders is None else [int(o) for o in orders]
        return [ms.MeasureCandidate(by_order[o], self.args_info) for o in orders]


def _folder_rows(folder: pathlib.Path, machine) -> list[dict]:
    """Replay every record of one log folder and derive its columns."""

    log = ReplayedLog(folder)
    w, target, manifest = log.workload, log.target, log.manifest
    policy = RooflinePolicy()
    base = {
        "workload": manifest.get("workload_key"),
        "kernel": w.name if w else "prim_func",
        "shape": "x".join(str(v) for v in w.args.values() if isinstance(v, int)) if w else "",
        "dtype": w.dtype if w else "",
        "target": manifest.get("target_key"),
        "cpu_model": manifest.get("cpu_model"),
    }
    rows = []
    for order, secs, sch, status in log.entries:
        row = dict(base, order=order, seconds=secs if secs is not None else float("nan"))
        row["status"] = status
        if sch is not None:
            feats = features(sch, target, w, stores=True)  # priced as they are, not again
            cost = evaluate(policy, feats, target, machine=machine)
            row.update(numeric_features(feats, cost))
            row.update(store_columns(feats.store_features))
            slim = feats.to_dict() | {"store_features": None}  # the ms_* columns hold them
            row["features_json"] = json.dumps(slim, sort_keys=True)
        rows.append(row)
    return rows


def _load_folder(folder: pathlib.Path, machine, cache: bool):

    import pandas as pd  # lazy: pandas adds ~0.3 s to `import tvm_ext`

    name = _cache_name(folder)
    if cache:
        for path in (folder / name, cache_dir() / name):  # shipped beside the log, or ours
            if path.exists():
                return read_frame(path)
    frame = pd.DataFrame(_folder_rows(folder, machine))
    if cache:
        with files.atomic_path(cache_dir() / name, suffix=".csv.gz") as tmp:
            write_frame(frame, tmp)
    return frame


def write_frame(frame, path) -> None:
    """Save dataset rows (a cache, or the rows a frozen evaluation ran on) as gzipped CSV;
    :func:`read_frame` reads them back to the same values (floats round-trip exactly)."""
    frame.to_csv(path, index=False, compression="gzip")


def read_frame(path):
    """Dataset rows written by :func:`write_frame`."""
    import pandas as pd  # lazy: pandas adds ~0.3 s to `import tvm_ext`

    return pd.read_csv(path, keep_default_na=False, na_values=["", "NaN", "nan"])


def dataset(
    log_dirs,
    *,
    include_failed: bool = False,
    cache: bool = True,
    machine=None,
    progress: bool = False,
):
    """One row per measured candidate of the logs in ``log_dirs`` (see the module docstring).

    ``machine`` prices the roofline columns (default: this host's probed model). A cached
    folder keeps the columns priced when its cache was written (on the machine that tuned it,
    for the shipped dataset); ``cache=False`` derives and prices them again.
    """
    import pandas as pd  # lazy: pandas adds ~0.3 s to `import tvm_ext`

    folders = log_folders(log_dirs)
    if machine is None:
        machine = host_machine()
    frames: Iterable = folders
    if progress:
        frames = tqdm(folders, desc="dataset", unit="log")
    data = pd.concat([_load_folder(f, machine, cache) for f in frames], ignore_index=True)
    if not include_failed:
        data = data[data["status"] == "ok"].reset_index(drop=True)
    return data


def feature_columns(data) -> list[str]:
    """The numeric model inputs of a dataset frame (``f_*``, ``rf_log_*``, ``ms_*``)."""
    return [c for c in data.columns if c.startswith(("f_", "rf_log_", "ms_"))]


MIN_CALIBRATION_ROWS = 20


def check_training_data(data, min_rows: int, columns=()):
    """The measured rows of ``data`` with a positive finite time, or a DatasetError."""
    import pandas as pd  # lazy: pandas adds ~0.3 s to `import tvm_ext`

    if not isinstance(data, pd.DataFrame):
        raise TypeError(f"expected a dataset DataFrame, not {type(data).__name__}")
    absent = [c for c in ("workload", "seconds", *columns) if c not in data.columns]
    if absent:
        raise DatasetError(f"the dataset lacks the column(s) {', '.join(absent)}")
    ok = data["seconds"].apply(lambda s: isinstance(s, float) and math.isfinite(s) and s > 0)
    if "status" in data.columns:
        ok &= data["status"] == "ok"
    rows = data[ok].reset_index(drop=True)
    if len(rows) < min_rows:
        raise DatasetError(
            f"{len(rows)} measured rows with a positive finite time; at least {min_rows} needed"
        )
    return rows
