"""Every frozen log shipped in tuning_logs/ replays with parity on this machine when it has
every ISA feature the log's schedule uses, and is refused naming the missing ones otherwise."""

import pathlib
import warnings

import pytest
from conftest import cpu_has

from tvm_ext.base.errors import OtherCPUWarning, TargetMismatch
from tvm_ext.kernel_tuner.replayer import replay, replays_here
from tvm_ext.records.logs import find_logs, read_manifest

ROOT = pathlib.Path(__file__).resolve().parent.parent / "tuning_logs"
SHIPPED = list(find_logs(ROOT))


def test_logs_are_shipped():
    assert len(SHIPPED) >= 10, f"expected the bench's frozen logs under {ROOT}"


@pytest.mark.parametrize("folder", SHIPPED, ids=lambda p: p.name)
def test_shipped_log_replays_with_parity_here_only_with_the_features_it_uses(folder):
    """One replay per log (each costs a build and a parity check): as it is where this CPU
    has every feature its schedule uses, else refused naming the missing ones and replayed
    built for this CPU (``allow_other_target``)."""
    manifest = read_manifest(folder)
    assert manifest["parity"]["ok"] is True and manifest["best_seconds"] > 0
    verdict = replays_here(folder)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if verdict.startswith("no: needs "):
            missing = verdict.removeprefix("no: needs ").split(", ")
            with pytest.raises(TargetMismatch) as info:
                replay(folder, repeat=2)
            assert f"missing: {', '.join(missing)}" in str(info.value)
            result = replay(folder, allow_other_target=True, repeat=2)  # ParityError if wrong
        else:
            assert verdict.startswith("yes"), verdict
            result = replay(folder, repeat=2)  # parity re-checked: ParityError if wrong
    assert result.measurement.gflops > 0 and result.recorded["best_seconds"] > 0
    if not result.same_machine:  # the recorded times are another CPU's: said, with both
        assert any(issubclass(w.category, OtherCPUWarning) for w in caught)


def test_shipped_avx512_logs_are_refused_on_a_cpu_without_it(host):
    if cpu_has("avx512f", host):
        pytest.skip("this CPU has AVX-512: the shipped znver4 logs replay here")
    verdicts = {f.name: replays_here(f) for f in SHIPPED if f.parent.name == "llvm-znver4-2c"}
    # Every shipped schedule vectorizes 512 bits or more (16+ float32 lanes) on Zen 4.
    assert verdicts and all(v == "no: needs avx512f" for v in verdicts.values()), verdicts
    with pytest.raises(TargetMismatch, match=r"uses avx512f for 512-bit vectors .*"
                                             r"missing: avx512f\)"):  # fmt: skip
        replay(ROOT / "llvm-znver4-2c" / "matmul_M512_N512_K512_float32")
