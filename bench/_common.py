"""Shared helpers for the benchmark scripts: timing peers fairly, writing README tables."""

from __future__ import annotations

import datetime
import os
import pathlib
import re
import sys

import pandas as pd
from threadpoolctl import threadpool_info

from tvm_ext.measurement.measure import time_callable  # noqa: F401 (the bench scripts' timer)
from tvm_ext.records.logs import cpu_model as cpu_name  # every figure names the CPU it ran on

README = pathlib.Path(__file__).with_name("README.md")


def write_section(name: str, header: str, table: pd.DataFrame, **markdown) -> None:
    """Replace the README section between ``<!-- name -->`` markers with a fresh table
    (``markdown``: options for ``DataFrame.to_markdown``, default two decimals)."""
    text = README.read_text() if README.exists() else "# Benchmarks\n"
    stamp = datetime.date.today().isoformat()
    body = f"<!-- {name} -->\n{header}\n\nMeasured {stamp} on {cpu_name()}.\n\n"
    body += (
        table.to_markdown(index=False, **({"floatfmt": ".2f"} | markdown)) + f"\n<!-- /{name} -->"
    )
    pattern = re.compile(rf"<!-- {name} -->.*?<!-- /{name} -->", re.S)
    text = pattern.sub(body, text) if pattern.search(text) else text.rstrip() + "\n\n" + body + "\n"
    README.write_text(text)


def blas_report() -> str:
    """Which BLAS (with its CPU kernel) and OpenMP libraries are loaded, with their threads, and
    the kernel level torch dispatches to (its own MKL/oneDNN are not visible to threadpoolctl)."""
    rows = []
    for lib in threadpool_info():
        parts = [lib["internal_api"], lib.get("version"), lib.get("architecture")]
        name = " ".join(p for p in parts if p)
        rows.append(f"{name} ({lib['num_threads']} threads, {os.path.basename(lib['filepath'])})")
    torch = sys.modules.get("torch")
    if torch is not None:
        rows.append(f"torch {torch.__version__} CPU capability {_torch_capability(torch)}")
    return "; ".join(rows) or "none loaded"


def _torch_capability(torch) -> str:
    try:
        return str(torch.backends.cpu.get_cpu_capability())
    except AttributeError:  # older torch
        return "unknown"
