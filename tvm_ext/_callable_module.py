"""Let ``tvm_ext.tune(...)`` and ``tvm_ext.replay(...)`` call the function of the same name.

``tune`` and ``replay`` are both a submodule and the function it exports; once the submodule is
imported, Python binds the package attribute to the module, so the module itself is made
callable (``from tvm_ext.tune import tune`` keeps working).
"""

from __future__ import annotations

import sys
import types


def make_callable(module_name: str, function_name: str) -> None:
    module = sys.modules[module_name]

    class _CallableModule(types.ModuleType):
        def __call__(self, *args, **kwargs):
            return getattr(self, function_name)(*args, **kwargs)

    module.__class__ = _CallableModule
