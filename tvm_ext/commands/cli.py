"""``tvm-ext``: what people run."""

from __future__ import annotations

import argparse
import datetime
import inspect
import json
import logging
import os
import pathlib
import sys
import traceback
import warnings
from importlib.metadata import version

import pandas as pd

from tvm_ext.base.errors import (
    DatasetError,
    LogError,
    ModelFileError,
    TvmExtError,
)
from tvm_ext.base.tvm_api import TVM_VERSION
from tvm_ext.commands.lab import run_lab, run_model_lab
from tvm_ext.commands.report import report
from tvm_ext.cost import RooflinePolicy, ServicePolicy, ServiceProfile, XGBoostPolicy, dataset
from tvm_ext.cost.heldout import evaluate_policies
from tvm_ext.cost.training_data import write_frame
from tvm_ext.hardware.machine import cache_path, host_machine
from tvm_ext.hardware.machine_model import MachineModel
from tvm_ext.hardware.target import host_target
from tvm_ext.kernel_tuner.replayer import replay, replays_here
from tvm_ext.kernel_tuner.tuner import tune
from tvm_ext.model_pipeline.compile import compile
from tvm_ext.model_pipeline.model_replay import replay_model
from tvm_ext.model_pipeline.model_tuner import describe, tune_model
from tvm_ext.model_pipeline.profile import profile
from tvm_ext.records.logs import cpu_model, find_logs, target_key
from tvm_ext.workloads import kernels, models
from tvm_ext.workloads.suite import SUITE, build_suite

# A user's mistake (a bad size, dtype, file or folder) ends in one line and exit code 2; a
# failure of the work itself (nothing measured, parity) in one line and exit code 1.
USER_ERRORS = (ValueError, OSError, LogError, ModelFileError, DatasetError)


def _info(args) -> int:

    target = host_target()
    model = host_machine(target, reprobe=args.reprobe)
    print(f"tvm-ext {version('tvm-ext')}, TVM {TVM_VERSION}")
    print(
        "target: " + json.dumps({k: str(target.attrs[k]) for k in ("mcpu", "mtriple", "num-cores")})
    )
    print(f"machine model ({model.cpu}, {model.cores} cores; cached in {cache_path(target)}):")

    def row(name, v, text):
        taken = (v.when or "unknown") + (" (provisional)" if v.provisional else "")
        return (name, text, v.source, taken, v.note)

    rows = [row("peak " + k, v, f"{v.value / 1e9:.1f} GFLOP/s") for k, v in model.peaks.items()]
    rows += [row("bandwidth " + k, v, f"{v.value / 1e9:.1f} GB/s")
             for k, v in model.bandwidth.items()]  # fmt: skip
    lat = model.fma_latency
    rows.append(row("FMA latency", lat, f"{lat.value * 1e9:.2f} ns"))
    columns = ["figure", "value", "source", "taken", "note"]
    print(pd.DataFrame(rows, columns=columns).to_string(index=False))
    return 0


def _lab(args) -> int:

    target = host_target()
    print(
        f"schedule mini-lab: matmul {args.size}^3 float32 on {target.attrs['mcpu']}, "
        f"{target.attrs['num-cores']} threads"
    )
    table = run_lab(args.size, target, trials=args.trials)
    with pd.option_context("display.max_colwidth", 90, "display.width", 200):
        print(table.to_string(index=False, float_format=lambda x: f"{x:.2f}"))
    failed = table["parity"].str.startswith("FAIL").any()
    if args.model != "none":
        models = run_model_lab(args.model, args.model_size, target)
        model = models.attrs["model"]
        print(
            f"\nmodel: {model.key} ({model.flops / 1e6:.0f} MFLOP), end to end, "
            f"{target.attrs['num-cores']} threads each, parity against numpy first"
        )
        print(models.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
        failed = failed or models["parity"].str.startswith("FAIL").any()
    return 1 if failed else 0


def _is_zoo_model(name: str) -> bool:

    return name in models.ZOO


def _tune_model(args) -> int:

    if args.shape:
        raise ValueError(f"{args.kernel} is a zoo model: it takes --size and --batch, no sizes")
    model = models.build(args.kernel, args.size, batch=args.batch)
    target = host_target()
    print(f"tuning {model.key} on {target.attrs['mcpu']} ({target.attrs['num-cores']} threads), "
          f"{args.trials} trials")  # fmt: skip
    r = tune_model(model, target, trials=args.trials, seed=args.seed, log_dir=args.log_dir,
                   batch=args.batch_trials, policy=load_policy(args.policy),
                   audit=args.audit)  # fmt: skip
    _print_tasks(r.tasks)
    print(describe(r) + (f"; logs in {r.log_dir}" if r.log_dir else ""))
    return 0


def _print_tasks(table) -> None:
    shown = table.copy()
    for column in [c for c in shown.columns if c.endswith("_s")]:
        shown[column.removesuffix("_s") + " ms"] = shown.pop(column) * 1e3
    with pd.option_context("display.width", 200, "display.max_columns", 30):
        print(shown.to_string(index=False, float_format=lambda x: f"{x:.4g}"))


def _tune(args) -> int:

    if _is_zoo_model(args.kernel):
        return _tune_model(args)
    ctor = kernels.SUITE.get(args.kernel)
    if ctor is None:
        raise ValueError(
            f"unknown kernel {args.kernel!r}; choose one of {sorted(kernels.SUITE)}, or a zoo "
            "model (tvm-ext tune encoder --size small)"
        )
    dims = [
        p
        for p in inspect.signature(ctor).parameters.values()
        if p.annotation in (int, "int") and p.default is inspect.Parameter.empty
    ]
    if len(args.shape) != len(dims):
        raise ValueError(
            f"{args.kernel} takes {len(dims)} sizes ({', '.join(d.name for d in dims)}), "
            f"got {len(args.shape)}"
        )
    w = ctor(*args.shape, **({"dtype": args.dtype} if args.dtype else {}))
    policy = load_policy(args.policy)
    target = host_target()
    r = tune(
        w.func,
        target,
        trials=args.trials,
        seed=args.seed,
        log_dir=args.log_dir,
        audit=args.audit,
        policy=policy,
    )
    m, st = r.measurement, r.stats
    print(f"{w.key} on {target.attrs['mcpu']} ({m.threads} threads), winner from the {r.source}")
    print(
        f"  parity ok (max rel error {m.max_rel_error:.1e}); {m.seconds * 1e3:.3f} ms; "
        f"{m.gflops:.1f} GFLOP/s; {100 * m.peak_fraction:.1f}% of peak; bound: {r.binding} "
        f"({100 * (st['envelope_fraction'] or 0):.0f}% of the envelope)"
    )
    print(
        f"  candidates: {st['generated']} generated, {st['dropped']} dropped by the bound, "
        f"{st['measured']} measured, {st['regrets']} regrets"
        + (f"; frozen log in {r.log_folder}" if r.log_folder else "")
    )
    return 0


def _replay_model(args) -> int:

    model = models.build(args.folder, args.size, batch=args.batch)
    r = replay_model(model, None, args.log_dir, allow_other_target=args.allow_other_target)
    print(f"replayed {model.key} from {args.log_dir} (no search)")
    _print_tasks(r.tasks)
    print(describe(r))
    return 0


def _replay(args) -> int:

    if _is_zoo_model(args.folder) and not os.path.exists(args.folder):
        return _replay_model(args)
    r = replay(args.folder, allow_other_target=args.allow_other_target)
    m, rec = r.measurement, r.recorded
    print(f"replayed {r.folder} (no search)")
    print(f"  parity ok (max rel error {m.max_rel_error:.1e})")
    where = f"{target_key(host_target())}, {cpu_model()}"
    rows = [
        ("recorded", rec.get("best_seconds"), rec.get("best_gflops"), rec.get("date"),
         f"{rec.get('target_key')}, {rec.get('cpu_model')}"),
        ("replayed", m.seconds, m.gflops, "now", where),
    ]  # fmt: skip
    table = pd.DataFrame(rows, columns=["", "seconds", "GFLOP/s", "when", "where"])
    print(table.to_string(index=False, float_format=lambda x: f"{x:.6g}"))
    return 0


def _report(args) -> int:

    if not pathlib.Path(args.log_dir).is_dir():
        raise FileNotFoundError(f"{args.log_dir}: no such folder of tuning logs")
    here = host_target()
    table = report(args.log_dir, host_machine(here), here)
    if table.empty:
        print(f"no logs under {args.log_dir}")
        return 1
    table["replays here"] = [replays_here(folder, here) for folder in find_logs(args.log_dir)]
    table["% peak"] = [v if isinstance(v, str) else f"{v:.1f}" for v in table["% peak"]]
    print(
        table.to_markdown(index=False, floatfmt=".1f")
        if args.markdown
        else table.to_string(index=False, float_format=lambda x: f"{x:.1f}")
    )
    return 0


def load_policy(spec: str):
    """``roofline``, ``service:PROFILE.json`` or ``xgboost:MODEL.json`` as a policy."""

    kind, _, path = spec.partition(":")
    if kind == "roofline" and not path:
        return RooflinePolicy()
    if kind == "service" and path:
        return ServicePolicy(ServiceProfile.load(path))
    if kind == "xgboost" and path:
        return XGBoostPolicy.load(path)
    raise ValueError(
        f"--policy {spec!r}: expected roofline, service:PROFILE.json or xgboost:MODEL.json"
    )


DATASET_FILE = "dataset.csv.gz"


def _evaluate_policies(args) -> int:
    # The model that prices the roofline columns (frozen beside the results): this host's, or
    # the one given (re-freezing after a change to the bound, with the model that froze it).
    machine = (MachineModel.from_json(json.loads(pathlib.Path(args.machine).read_text()))
               if args.machine else host_machine())  # fmt: skip
    # Columns cached by an earlier run were priced by the model of that run: with a model
    # given, every column is priced again by it.
    data = dataset(args.logs, progress=True, machine=machine, cache=not args.machine)
    kinds = data["kernel"].nunique()
    print(
        f"dataset: {len(data)} measured candidates of {data['workload'].nunique()} workloads "
        f"({kinds} kernel kinds) from {args.logs}"
    )
    per, summary, fitted = evaluate_policies(
        data, None if args.no_stock else args.logs, k=args.folds, seed=args.seed, progress=True
    )
    print(f"held-out protocol: {args.folds} folds by workload, seed {args.seed}")
    print(summary.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    if args.out:
        out = pathlib.Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        fitted["service_profile"].save(out / "service_profile.json")
        fitted["xgboost"].save(out / "xgboost_policy.json")
        # The machine model that priced the roofline columns: a re-run prices with it.
        (out / "machine.json").write_text(json.dumps(machine.to_json(), indent=1))
        # The priced rows the protocol ran on: a check re-runs the protocol on them and
        # re-prices a sample (the slow tier all of them) against them.
        write_frame(data, out / DATASET_FILE)
        record = {
            "command": "tvm-ext evaluate-policies " + " ".join(sys.argv[2:]),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "cpu_model": cpu_model(),
            "dataset": {
                "logs": str(args.logs),
                "rows": len(data),
                "workloads": sorted(set(data["workload"])),
            },
            "folds": args.folds,
            "seed": args.seed,
            "summary": summary.to_dict(orient="records"),
            "per_workload": per.to_dict(orient="records"),
        }
        (out / "heldout.json").write_text(json.dumps(record, indent=1, default=float))
        (out / "heldout.md").write_text(summary.to_markdown(index=False, floatfmt=".3f") + "\n")
        print(f"frozen calibration, model and held-out results written to {out}/")
    return 0


def _profile(args) -> int:
    if args.model in models.ZOO:
        model = models.build(args.model, args.size, batch=args.batch)
    elif args.model in SUITE:
        model = build_suite(args.model, args.size)
    else:
        raise ValueError(f"no model {args.model!r}: the zoo has {sorted(models.ZOO)}, the "
                         f"suite {sorted(SUITE)}")  # fmt: skip
    compiled = compile(model)
    result = profile(compiled, min_seconds=args.seconds)
    table = result.table()
    if args.top:
        table = table[(table["kind"] != "kernel") | (table.index < args.top)]
    target, latency = compiled.target, result.latency.seconds
    print(f"{model.key} on {cpu_model()} ({target.attrs['mcpu']}, {compiled.threads} threads): "
          f"{latency * 1e3:.3f} ms end to end (median of {result.latency.repeats}), calls "
          f"timed over {result.runs} runs: kernels {result.kernels_s * 1e3:.3f} ms, all timed "
          f"calls {result.timed_s * 1e3:.3f} ms ({100 * result.timed_s / latency:.0f} % of "
          "the latency)")  # fmt: skip
    if args.markdown:
        print(table.to_markdown(index=False, floatfmt=".3g"))
    else:
        with pd.option_context("display.width", 200, "display.max_columns", 20,
                               "display.max_colwidth", 60):  # fmt: skip
            print(table.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    return 0


def _model_options(parser) -> None:
    parser.add_argument("--size", default="full", choices=("full", "small"), help="zoo size")
    parser.add_argument("--batch", type=int, default=1, help="the zoo model's batch")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tvm-ext", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)
    info = sub.add_parser("info", help="target, CPU and machine model with sources")
    info.add_argument("--reprobe", action="store_true", help="measure the machine again")
    info.set_defaults(run=_info)
    lab = sub.add_parser("lab", help="the schedule mini-lab table")
    lab.add_argument("--size", type=int, default=512, help="matmul size (default 512)")
    lab.add_argument(
        "--model",
        default="decoder",
        help="zoo model for the model section (default decoder; 'none' skips it)",
    )
    lab.add_argument("--model-size", default="full", choices=("full", "small"))
    lab.set_defaults(run=_lab)
    tune = sub.add_parser("tune", help="tune a kernel of the suite, or a zoo model, on the host")
    tune.add_argument(
        "kernel", help="matmul, batch_matmul, conv2d, softmax, ...; or a zoo model: mlp, encoder, "
        "decoder, resnet"
    )  # fmt: skip
    tune.add_argument("shape", type=int, nargs="*", help="the kernel's sizes, in order")
    _model_options(tune)
    tune.add_argument("--batch-trials", type=int, default=16, help="trials per batch (models)")
    tune.add_argument("--dtype", default=None)
    tune.add_argument("--trials", type=int, default=64)
    tune.add_argument("--seed", type=int, default=0)
    tune.add_argument("--log-dir", default=None, help="keep the MetaSchedule database here")
    tune.add_argument("--audit", action="store_true", help="measure dropped candidates too")
    tune.add_argument(
        "--policy",
        default="roofline",
        help="roofline (default), service:PROFILE.json or xgboost:MODEL.json",
    )
    tune.set_defaults(run=_tune)
    lab.add_argument("--trials", type=int, default=32, help="trials for the tuned row (0: none)")
    rp = sub.add_parser(
        "replay", help="replay one frozen log folder, or a zoo model from its tasks' logs"
    )
    rp.add_argument("folder", help="a log folder, or a zoo model name (mlp, encoder, ...)")
    rp.add_argument("--allow-other-target", action="store_true")
    rp.add_argument("--log-dir", default="tuning_logs", help="the logs of a model's tasks")
    _model_options(rp)
    rp.set_defaults(run=_replay)
    prof = sub.add_parser("profile", help="compile a zoo or suite model and time its kernels")
    prof.add_argument("model", help=f"a zoo model {sorted(models.ZOO)} or a suite model "
                      f"{sorted(SUITE)} (the suite needs the [torch] extra)")  # fmt: skip
    _model_options(prof)
    prof.add_argument("--top", type=int, default=0, help="only the N slowest kernels")
    prof.add_argument("--seconds", type=float, default=1.0, help="instrumented runs (seconds)")
    prof.add_argument("--markdown", action="store_true")
    prof.set_defaults(run=_profile)
    rep = sub.add_parser("report", help="a table of every frozen log")
    rep.add_argument("log_dir", nargs="?", default="tuning_logs")
    rep.add_argument("--markdown", action="store_true")
    rep.set_defaults(run=_report)
    ev = sub.add_parser(
        "evaluate-policies",
        help="held-out comparison of the cost policies on a dataset of tuning logs",
    )
    ev.add_argument("--logs", default="tuning_logs/dataset", help="the dataset's log root")
    ev.add_argument("--folds", type=int, default=6, help="folds by workload (default 6)")
    ev.add_argument("--seed", type=int, default=0)
    ev.add_argument(
        "--out",
        default=None,
        help="write the frozen calibration, the model and the results to this folder",
    )
    ev.add_argument("--no-stock", action="store_true", help="skip MetaSchedule's XGB rows")
    ev.add_argument("--machine", help="price with this machine model (JSON, e.g. a frozen "
                    "policies/machine.json) instead of this host's")  # fmt: skip
    ev.set_defaults(run=_evaluate_policies)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    with warnings.catch_warnings():
        warnings.showwarning = _show_warning
        return _run(args)


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    print(f"tvm-ext: warning: {message}", file=sys.stderr)


def _run(args) -> int:
    """Run the command; an error ends in one line on stderr (its traceback with -v)."""
    try:
        return args.run(args)
    except (*USER_ERRORS, TvmExtError) as err:
        if args.verbose:
            traceback.print_exc()
        print(f"tvm-ext {args.command}: error: {err}", file=sys.stderr)
        return 2 if isinstance(err, USER_ERRORS) else 1


if __name__ == "__main__":
    sys.exit(main())
