"""``tvm-ext``: what people run."""

from __future__ import annotations

import argparse
import json
import logging
import sys

import pandas as pd


def _info(args) -> int:
    from . import __version__
    from ._tvm import tvm
    from .machine import cache_path, host_machine
    from .target import host_target

    target = host_target()
    model = host_machine(target, reprobe=args.reprobe)
    print(f"tvm-ext {__version__}, TVM {tvm.__version__}")
    print(f"target: {json.dumps({k: str(v) for k, v in target.attrs.items() if k in ('mcpu', 'mtriple', 'num-cores')})}")
    print(f"machine model ({model.cpu}, {model.cores} cores; cached in {cache_path(target)}):")
    rows = [("peak " + k, f"{v.value / 1e9:.1f} GFLOP/s", v.source, v.note) for k, v in model.peaks.items()]
    rows += [("bandwidth " + k, f"{v.value / 1e9:.1f} GB/s", v.source, v.note)
             for k, v in model.bandwidth.items()]
    print(pd.DataFrame(rows, columns=["figure", "value", "source", "note"]).to_string(index=False))
    return 0


def _lab(args) -> int:
    from .lab import run_lab
    from .target import host_target

    target = host_target()
    print(f"schedule mini-lab: matmul {args.size}^3 float32 on {target.attrs['mcpu']}, "
          f"{target.attrs['num-cores']} threads")
    table = run_lab(args.size, target)
    with pd.option_context("display.max_colwidth", 90, "display.width", 200):
        print(table.to_string(index=False, float_format=lambda x: f"{x:.2f}"))
    return 0 if not table["parity"].str.startswith("FAIL").any() else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tvm-ext", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)
    info = sub.add_parser("info", help="target, CPU and machine model with sources")
    info.add_argument("--reprobe", action="store_true", help="measure the machine again")
    info.set_defaults(run=_info)
    lab = sub.add_parser("lab", help="the schedule mini-lab table")
    lab.add_argument("--size", type=int, default=512, help="matmul size (default 512)")
    lab.set_defaults(run=_lab)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
