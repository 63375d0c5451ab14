"""What the compiled model's boundary costs on a real model: transformers' ``BertModel``
(random weights, batch 1), exported with ``torch.export`` and compiled with ``tvm_ext.compile``.

Two costs, each side by side in one process:
- the input checks of one call (``check_inputs``: number, kind, rank, shape, dtype, and every
  token id against the vocabulary), against the model's latency;
- the guarded index kernels (``take`` in ``clip`` mode) against the same model compiled with
  the importer's ``fast`` lookups (``safe_indexing`` switched off for this comparison only),
  both timed by TVM's time evaluator, rounds interleaved: the whole model (whose round-to-round
  spread on a shared VM is larger than the difference) and each lookup kernel alone.

Parity against torch is checked on both builds before any time is taken.

    .venv/bin/python bench/boundary_cost.py [--layers 4] [--seq 128] [--rounds 5]
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import time

import numpy as np
import pandas as pd

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from _common import cpu_name, write_section  # noqa: E402

from tvm_ext.base import tvm_api  # noqa: E402
from tvm_ext.base.host_threads import reference_threads  # noqa: E402
from tvm_ext.hardware.target import target_cores  # noqa: E402
from tvm_ext.model_pipeline import compile as compile_module  # noqa: E402
from tvm_ext.model_pipeline.boundary import check_inputs  # noqa: E402


def bert(layers: int, seq: int):
    import torch  # lazy: the [bench] extra
    from transformers import BertConfig, BertModel  # lazy: installed for benchmarks only

    torch.manual_seed(0)
    model = BertModel(BertConfig(num_hidden_layers=layers), add_pooling_layer=False).eval()
    ids = torch.randint(0, model.config.vocab_size, (1, seq), dtype=torch.int64)
    with torch.no_grad():
        exported = torch.export.export(model, (ids,))
    from tvm.relax.frontend.torch import from_exported_program  # lazy: the importer

    mod = from_exported_program(exported, keep_params_as_input=True)

    def reference(inputs):
        with torch.no_grad():
            return model(torch.from_numpy(inputs[0])).last_hidden_state.numpy()

    return mod, reference, ids.numpy(), model.config.vocab_size


def compiled(mod, reference, ids, guarded: bool):
    if guarded:
        return compile_module.compile(mod, reference=reference, inputs=[ids])
    real = compile_module.safe_indexing
    compile_module.safe_indexing = lambda m: m  # this comparison only: the importer's kernels
    try:
        return compile_module.compile(mod, reference=reference, inputs=[ids])
    finally:
        compile_module.safe_indexing = real


def lookup_kernels(model) -> dict:
    """The PrimFuncs of a compiled model that gather rows (their names say ``take``)."""
    return {
        gv.name_hint: f
        for gv, f in model.applied.mod.functions.items()
        if isinstance(f, tvm_api.PrimFunc) and "take" in gv.name_hint
    }


def kernel_timer(func, target):
    """A timer of one PrimFunc on random inputs, its integer inputs (ids) 0 or 1: valid rows
    of every table, so the importer's unguarded kernel reads inside it too."""
    lib = tvm_api.build(tvm_api.IRModule({"main": func}), target)
    rng = np.random.default_rng(0)
    dev = tvm_api.cpu(0)
    args = []
    for shape, dtype in tvm_api.param_specs(func):
        if dtype.startswith("int"):
            args.append(tvm_api.tensor(rng.integers(0, 2, shape).astype(dtype), dev))
        else:
            args.append(tvm_api.tensor(rng.standard_normal(shape).astype(dtype), dev))
    evaluator = lib.time_evaluator(lib.entry_name, dev, number=1, repeat=20, min_repeat_ms=20)
    threads = target_cores(target)

    def seconds() -> float:
        with tvm_api.threads(threads):
            return float(np.median(evaluator(*args).results))

    return seconds


def check_seconds(model, ids, calls: int = 2000) -> float:
    """Median per-call time of the boundary's checks on ``ids`` (of 5 loops of ``calls``)."""
    args = (model.name, model.input_names, model.input_specs, model.index_checks, (ids,))
    loops = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            check_inputs(*args)
        loops.append((time.perf_counter() - start) / calls)
    return statistics.median(loops)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-readme", action="store_true", help="do not update bench/README.md")
    args = parser.parse_args()
    with reference_threads():
        mod, reference, ids, vocab = bert(args.layers, args.seq)
    guarded = compiled(mod, reference, ids, guarded=True)
    plain = compiled(mod, reference, ids, guarded=False)
    assert guarded.index_checks and any(c.extents == (vocab,) for c in guarded.index_checks)
    for model in (guarded, plain):
        model.check()  # parity against torch before any time
    times = {"guarded": [], "fast": []}
    for _ in range(args.rounds):  # interleaved: a drift of the machine hits both alike
        times["guarded"].append(guarded.time(repeat=5, min_repeat_ms=200).seconds)
        times["fast"].append(plain.time(repeat=5, min_repeat_ms=200).seconds)
    model_s = {k: min(v) for k, v in times.items()}
    kernels = {k: lookup_kernels(m) for k, m in (("guarded", guarded), ("fast", plain))}
    assert sorted(kernels["guarded"]) == sorted(kernels["fast"]), kernels
    timers = {
        name: {k: kernel_timer(kernels[k][name], guarded.target) for k in kernels}
        for name in kernels["guarded"]
    }
    lookups = {name: {"guarded": [], "fast": []} for name in timers}
    for _ in range(args.rounds):
        for name, pair in timers.items():
            for k, timer in pair.items():
                lookups[name][k].append(timer())
    check_s = check_seconds(guarded, ids)
    rows = [
        {"what": "input checks of one call", "time": f"{check_s * 1e6:.1f} us",
         "vs model": f"{100 * check_s / model_s['guarded']:.3f} %"},
        {"what": "model, guarded lookups (clip)", "time": f"{model_s['guarded'] * 1e3:.2f} ms",
         "vs model": "-"},
        {"what": "model, importer's lookups (fast)", "time": f"{model_s['fast'] * 1e3:.2f} ms",
         "vs model": f"guarded / fast = {model_s['guarded'] / model_s['fast']:.3f}"},
    ]  # fmt: skip
    for name, pair in lookups.items():
        g, f = min(pair["guarded"]), min(pair["fast"])
        share = 100 * (g - f) / model_s["guarded"]
        rows.append({"what": f"kernel {name}: clip vs fast",
                     "time": f"{g * 1e6:.1f} vs {f * 1e6:.1f} us",
                     "vs model": f"{share:+.3f} %"})  # fmt: skip
    table = pd.DataFrame(rows)
    mcpu = str(guarded.target.attrs.get("mcpu", "?"))
    print(f"{cpu_name()} ({mcpu}), BertModel {args.layers} layers, seq {args.seq}, "
          f"{guarded.threads} threads")  # fmt: skip
    print(table.to_string(index=False))
    print("rounds (ms):", {k: [round(t * 1e3, 3) for t in v] for k, v in times.items()})
    if not args.no_readme:
        header = (
            "### The boundary's cost (`bench/boundary_cost.py`)\n\n"
            f"transformers `BertModel`, {args.layers} layers, seq {args.seq}, batch 1, random "
            f"weights, {guarded.threads} threads, `-mcpu={mcpu}`; parity against torch checked "
            "on both builds. "
            "The input checks are timed alone (median of 5 loops of 2000 calls); the models by "
            f"`Compiled.time` (TVM's time evaluator), best of {args.rounds} interleaved rounds."
        )
        write_section("boundary-cost", header, table)


if __name__ == "__main__":
    main()
