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
ROOT_README = pathlib.Path(__file__).parent.parent / "README.md"


def write_section(
    name: str, header: str, table: pd.DataFrame, readme: pathlib.Path = README, **markdown
) -> None:
    """Replace the ``readme`` section between ``<!-- name -->`` markers with a fresh table
    (``markdown``: options for ``DataFrame.to_markdown``, default two decimals), under
    ``header`` and the line naming the day and the CPU (``tests/test_bench_tables.py``
    checks every section has them and that a script writes it)."""
    stamp = datetime.date.today().isoformat()
    body = f"{header}\n\nMeasured {stamp} on {cpu_name()}.\n\n"
    body += table.to_markdown(index=False, **({"floatfmt": ".2f"} | markdown))
    write_text(name, body, readme)


def write_text(name: str, text: str, readme: pathlib.Path = README) -> None:
    """Replace the ``readme`` section between ``<!-- name -->`` markers with ``text`` (a
    figure in prose: the sentence is the script's, the numbers its run's)."""
    page = readme.read_text() if readme.exists() else "# Benchmarks\n"
    body = f"<!-- {name} -->\n{text}\n<!-- /{name} -->"
    pattern = re.compile(rf"<!-- {name} -->.*?<!-- /{name} -->", re.S)
    if pattern.search(page):
        page = pattern.sub(lambda _: body, page)
    else:
        page = page.rstrip() + "\n\n" + body + "\n"
    readme.write_text(page)


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


def onnx_export(module, inputs, path: str, dynamic_axes=None) -> str:
    """Export ``module`` on ``inputs`` (torch tensors) to ONNX at ``path``: the TorchScript
    exporter first (what onnxruntime's own tutorials use), with torch's fused attention fast
    path off (ViT's _native_multi_head_attention has no ONNX form); the torch.export-based
    exporter when it refuses an operator (transformers' masks: aten::diff). ``dynamic_axes``:
    {input name: {axis: name}} for axes the graph keeps symbolic."""
    import torch  # lazy: the [bench] extra

    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    names = list(dynamic_axes) if dynamic_axes else None
    try:
        with torch.no_grad():
            try:
                torch.onnx.export(module, tuple(inputs), path, dynamo=False, opset_version=17,
                                  input_names=names, dynamic_axes=dynamic_axes)  # fmt: skip
            except torch.onnx.errors.UnsupportedOperatorError:
                shapes = None
                if dynamic_axes:
                    shapes = {
                        k: {a: torch.export.Dim.AUTO for a in v} for k, v in dynamic_axes.items()
                    }
                torch.onnx.export(module, tuple(inputs), path, dynamo=True, opset_version=18,
                                  dynamic_shapes=shapes or None)  # fmt: skip
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)
    return path


def onnxruntime_session(path: str, cores: int):
    """An onnxruntime CPU session on ``path``, all graph optimizations, ``cores`` threads."""
    import onnxruntime as ort  # lazy: the [bench] extra

    options = ort.SessionOptions()
    options.intra_op_num_threads = cores
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def onnxruntime_call(model, module, inputs, cores: int, folder):
    """A no-argument call running ``model``'s torch module in onnxruntime on its inputs."""
    import numpy as np

    path = onnx_export(module, inputs, f"{folder}/{model.name}.onnx")
    session = onnxruntime_session(path, cores)
    feeds = {i.name: np.asarray(a) for i, a in zip(session.get_inputs(), model.inputs)}
    return lambda: session.run(None, feeds)[0]


def as_numpy(out):
    """A contender's output (a torch tensor, a list, a TVM tensor) as one numpy array."""
    import numpy as np

    if hasattr(out, "numpy"):
        out = out.numpy()
    elif isinstance(out, (list, tuple)):
        out = as_numpy(out[0])
    return np.asarray(out)


def add_timing_args(parser, rounds: int = 3, repeat: int = 5, min_ms: int = 200) -> None:
    """The one timing protocol's options (see ``time_callable``), with the README ones: every
    side-by-side script takes them (defaults: ``rounds``, ``repeat``, ``min_ms``)."""
    parser.add_argument("--rounds", type=int, default=rounds, help="interleaved rounds")
    parser.add_argument("--repeat", type=int, default=repeat, help="timed samples per round")
    parser.add_argument("--min-ms", type=int, default=min_ms, help="minimum ms per sample")
    parser.add_argument("--pause", type=float, default=0.5, help="seconds between contenders")
    parser.add_argument("--no-readme", action="store_true", help="do not update bench/README.md")
    parser.add_argument("--note", default="", help="a sentence for the README (e.g. load)")
