"""The README's mini-lab table, written by the run that measures it: ``tvm-ext lab`` (the
README's main command) on the host CPU, its kernel rows and its model section, into the
README between ``<!-- mini-lab -->`` markers.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python bench/lab.py [--no-readme]
"""

from __future__ import annotations

from _unpin import rerun_unpinned  # noqa: E402

rerun_unpinned()  # before numpy loads OpenBLAS

import argparse  # noqa: E402
import os  # noqa: E402

from _common import ROOT_README, write_section  # noqa: E402

from tvm_ext import host_target  # noqa: E402
from tvm_ext.commands.lab import run_lab, run_model_lab  # noqa: E402
from tvm_ext.hardware.target import target_cores, target_cpu  # noqa: E402

# The lab's columns as the README shows them.
COLUMNS = {
    "schedule": "schedule",
    "parity": "parity",
    "ms": "ms",
    "gflops": "GFLOP/s",
    "pct_peak": "% of fp32 peak",
    "pct_roofline": "% of roofline",
    "binding": "binding",
    "x_bound": "x proven bound",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--trials", type=int, default=32)
    parser.add_argument("--no-readme", action="store_true")
    args = parser.parse_args()
    target = host_target()
    cores, load = target_cores(target), os.getloadavg()[0]
    table = run_lab(args.size, target, trials=args.trials)
    model = run_model_lab("decoder", "full", target)
    print(table.to_string(index=False, float_format=lambda x: f"{x:.2f}"))
    print(model.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    shown = table[list(COLUMNS)].rename(columns=COLUMNS)
    m = model.attrs["model"]
    times = "; ".join(
        f"{r.contender} {r.ms:.3g} ms ({r.parity})" for r in model.itertuples() if r.ms == r.ms
    )
    header = (
        f"### Latest mini-lab (`make lab`: matmul {args.size}^3 float32, `{target_cpu(target)}`, "
        f"{cores} threads)\n\n"
        f"Written by `bench/lab.py` (the same run as `make lab`), load average {load:.1f} at "
        "the start. Peak: the fp32 FMA peak of this host's cached machine model "
        '(`tvm-ext info`); "x proven bound": time over the roofline bound of the schedule. '
        f"Model section ({m.key}, {m.flops / 1e6:.0f} MFLOP, end to end, parity against numpy "
        f"first, one timer for all): {times}. Shared machines move figures by tens of "
        "percent between runs; compare rows of one table."
    )
    if not args.no_readme:
        write_section("mini-lab", header, shown, ROOT_README)


if __name__ == "__main__":
    main()
