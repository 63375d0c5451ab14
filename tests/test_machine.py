import json

import numpy as np
import pytest

import tvm_ext.hardware.machine as M
from tvm_ext.base import tvm_api
from tvm_ext.hardware.machine_model import Figure, MachineModel
from tvm_ext.hardware.target import lanes_for


def test_probed_model_is_plausible_and_sourced(machine, host):
    assert machine.cores == int(host.attrs["num-cores"])
    fp32 = machine.peaks["float32"]
    assert fp32.source == "probed"
    # At least one 8-lane FMA every other cycle at 1 GHz per core; at most 64 lanes x 2 FMA
    # pipes at 6 GHz: a probe outside this range measured something else.
    assert machine.cores * 8e9 < fp32.value < machine.cores * 1.6e12
    assert 1e9 < machine.bandwidth["dram"].value < machine.bandwidth["llc"].value * 1.5
    for dtype in ("bfloat16", "int8"):
        assert machine.peaks[dtype].source == "table"
        assert machine.peaks[dtype].value >= fp32.value
    assert machine.peak("float16") == fp32.value


def test_fma_probe_runs_the_chains_it_counts(host):
    # The FLOP count assumes one FMA per chain per step, at the full vector width: the
    # generated loop body must hold exactly that (a rate test would be at the mercy of noise).
    import re

    from tvm_ext.hardware.probe_kernels import fma_chains

    chains, lanes = 12, lanes_for(host, 32)
    asm = tvm_api.build(tvm_api.IRModule({"main": fma_chains(1, chains, lanes, 1000)}), host)
    text = asm.inspect_source("asm")
    width = {16: "zmm", 8: "ymm", 4: "xmm"}[lanes]
    fmas = re.findall(rf"vfmadd\w+\s+[^\n]*%{width}", text)
    assert len(fmas) >= chains


def test_cache_round_trip_and_corrupt_cache(tmp_path, monkeypatch, machine, host):
    path = tmp_path / "machine.json"
    monkeypatch.setattr(M, "cache_path", lambda target: path)
    path.write_text(json.dumps(machine.to_json()))
    assert M.host_machine(host) == machine
    path.write_text('{"schema": 4, "cpu": "x"}')  # truncated: probed again, then rewritten
    calls = []
    monkeypatch.setattr(M, "probe", lambda target: calls.append(1) or machine)
    assert M.host_machine(host) == machine and calls == [1]
    assert MachineModel.from_json(json.loads(path.read_text())) == machine


def test_user_overrides(machine):
    model = machine.with_overrides({"peak.float32": 1e11, "bw.dram": 2e10})
    assert model.peaks["float32"].source == "user" and model.peak("float32") == 1e11
    assert model.bandwidth["dram"] == Figure(2e10, "user")
    assert model.peaks["int8"] == machine.peaks["int8"]
    for bad in ({"peak": 1.0}, {"bw.l7": 1.0}, {"peak.float32": -1.0}, {"bw.dram": np.nan}):
        with pytest.raises(ValueError, match="override"):
            machine.with_overrides(bad)


def test_roofline_seconds_picks_the_binding_arm(machine):
    m = machine.with_overrides({"peak.float32": 1e11, "bw.dram": 1e10, "bw.llc": 1e11})
    assert m.roofline_seconds(1e11, 1e3, "float32") == pytest.approx(1.0)
    big = 2 * m.llc_bytes
    assert m.roofline_seconds(1.0, big, "float32") == pytest.approx(big / 1e10)
    with pytest.raises(ValueError, match="no compute peak for dtype='complex64'"):
        m.peak("complex64")
