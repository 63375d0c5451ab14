"""``tvm-ext report``: one row per tuning log under a folder, read through the log format."""

from __future__ import annotations

import pandas as pd

from tvm_ext.records.logs import find_logs, read_manifest, target_key


def _peak_percent(manifest: dict, machine, here_key: str | None):
    """% of the compute peak of the machine that measured the log: the peak its manifest
    recorded, else (a log older than that field) this host's when the log is of this
    host's target; else None (n/a)."""
    gflops = manifest.get("best_gflops")
    if not gflops or not str(manifest.get("target_key", "")).startswith("llvm"):
        return None
    if manifest.get("peak_gflops"):
        return 100 * gflops / manifest["peak_gflops"]
    if machine is None or manifest.get("target_key") != here_key:
        return None
    dtype = (manifest.get("workload") or {}).get("args", {}).get("dtype", "float32")
    try:
        return 100 * gflops * 1e9 / machine.peak(dtype)
    except ValueError:
        return None


def report(root, machine=None, here=None):
    """One row per log under ``root``: best GFLOP/s, % of peak (of the peak recorded with the
    log; for an older log, this host's ``machine`` when ``here``, this host's target, is the
    log's; else n/a), binding arm, trials."""

    here_key = target_key(here) if here is not None else None
    rows = []
    for folder in find_logs(root):
        m = read_manifest(folder)
        trials = m.get("trials") or {}
        peak = _peak_percent(m, machine, here_key)
        rows.append(
            {
                "target": m.get("target_key"),
                "workload": m.get("workload_key"),
                "best GFLOP/s": m.get("best_gflops"),
                "% peak": peak if peak is not None else "n/a",
                "binding": m.get("binding"),
                "measured": trials.get("measured"),
                "dropped": trials.get("dropped"),
                "records": m.get("records"),
                "cpu": m.get("cpu_model"),
                "date": (m.get("date") or "")[:10],
            }
        )
    return pd.DataFrame(rows)


__all__ = ["report"]
