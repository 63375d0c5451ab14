"""Regression tests for facts about the pinned TVM (see shared/platform-notes.md)."""

import pathlib

import tvm
import tvm_ffi


def test_save_json_round_trips_a_tir_node():
    # apache-tvm-ffi 0.1.15.post2 segfaults here; the pin to 0.1.14.post0 must hold.
    node = tvm.tirx.IntImm("int32", 3)
    back = tvm.ir.load_json(tvm.ir.save_json(node))
    assert tvm_ffi.structural_equal(back, node)
    assert int(back.value) == 3


def test_pinned_versions():
    assert tvm.__version__ == "0.27.0.post1"
    from importlib.metadata import distribution, version

    assert version("apache-tvm-ffi") == "0.1.14.post0"
    # The modules imported are those of the pinned distributions (not a stray copy on the path).
    assert tvm_ffi.__version__ == "0.1.14.post0"
    for module, dist in ((tvm, "apache-tvm"), (tvm_ffi, "apache-tvm-ffi")):
        installed = pathlib.Path(distribution(dist).locate_file(f"{module.__name__}/__init__.py"))
        assert pathlib.Path(module.__file__).resolve() == installed.resolve(), module.__name__
