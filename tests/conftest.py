import pytest

import tvm_ext
from tvm_ext.facts.machine import host_machine


@pytest.fixture(scope="session")
def host():
    return tvm_ext.host_target()


@pytest.fixture(scope="session")
def machine(host):
    """The host's machine model (probed once per machine, then read from the cache)."""
    return host_machine(host)


def cpu_has(feature: str, target) -> bool:
    from tvm_ext.base import tvm_api

    return bool(tvm_api.global_func("target.llvm_cpu_has_feature")(feature, target))
