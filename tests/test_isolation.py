"""The test session never writes the user's cache directory (tests/conftest.py): the machine
model is probed into a temporary folder named by ``TVM_EXT_CACHE_DIR``, which this process
and every child process (build and run workers, notebook kernels, child tunes) use."""

import os
import pathlib
import subprocess
import sys

from tvm_ext.hardware.machine import cache_path

CHILD = "import tvm_ext; from tvm_ext.hardware.machine import cache_path; " \
        "print(cache_path(tvm_ext.host_target()))"  # fmt: skip


def test_machine_cache_is_the_sessions(host, machine):
    import platformdirs

    root = pathlib.Path(os.environ["TVM_EXT_CACHE_DIR"])
    real = platformdirs.user_cache_path("tvm-ext")  # the user's (not redirected)
    assert root.is_dir() and not root.is_relative_to(real)
    path = cache_path(host)
    assert path.parent == root and path.exists()  # the session's probe, written there
    child = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                           check=True, timeout=300).stdout.strip()  # fmt: skip
    assert pathlib.Path(child) == path  # a child process reads and writes the same file


def test_other_tvm_ext_caches_of_this_process_go_there_too():
    import platformdirs

    root = os.environ["TVM_EXT_CACHE_DIR"]
    assert platformdirs.user_cache_dir("tvm-ext") == root
    assert platformdirs.user_cache_dir("something-else") != root
