"""torch, torchvision and transformers, imported so that they work together on these machines.

torch is an optional dependency (the ``[torch]`` extra): nothing here runs at import time;
each function imports what it returns.

**torchvision with a CPU-only torch.** The index's torchvision wheel is the CUDA build (it
bundles ``libcudart``); against ``torch==2.13.0+cpu`` its C extension does not load, and
``import torchvision`` then fails in ``torchvision._meta_registrations``, which registers fake
(meta) kernels for the C operators (``torch.library.register_fake("torchvision::nms")``:
``RuntimeError: operator torchvision::nms does not exist``). transformers imports torchvision
when it is installed, so ``from transformers import BertModel`` fails the same way. The
models (resnet, mobilenet, ViT, ...) use no C operator: :func:`torchvision` retries the
import without the fake registrations (a placeholder for that one module), and only when the
first import failed for that reason; the C operators (``nms``, ``roi_align``, ...) stay
unavailable, as they already were.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types

_MISSING_OPERATOR = "operator torchvision::"


def torch():
    """The ``torch`` module; ImportError naming the extra when it is not installed."""
    try:
        return importlib.import_module("torch")
    except ImportError as err:
        raise ImportError("torch models need the [torch] extra: pip install -e '.[torch]'") from err


def torchvision():
    """The ``torchvision`` module, imported past its C operators when they cannot load (see
    the module's docstring)."""
    torch()
    try:
        return importlib.import_module("torchvision")
    except RuntimeError as err:
        if _MISSING_OPERATOR not in str(err):
            raise
    for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        del sys.modules[name]  # the half-imported package, so the retry starts clean
    placeholder = types.ModuleType("torchvision._meta_registrations")
    placeholder.__doc__ = "tvm-ext: left out, torchvision's C operators did not load"
    sys.modules["torchvision._meta_registrations"] = placeholder
    return importlib.import_module("torchvision")


def transformers():
    """The ``transformers`` module, with torchvision made importable first when it is
    installed (transformers imports it)."""
    torch()
    if importlib.util.find_spec("torchvision") is not None:
        torchvision()
    return importlib.import_module("transformers")


__all__ = ["torch", "torchvision", "transformers"]
