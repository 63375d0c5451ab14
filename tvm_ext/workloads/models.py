"""The model zoo: small networks to compile end to end, each with a numpy reference.

``ZOO[name](size="full" | "small", batch=1, seed=0)`` builds a
:class:`~tvm_ext.workloads.model_base.Model`: a Relax module from ``tvm.relax.frontend.nn``
(``forward(inputs..., weights...)``), seeded weights and inputs (nothing is downloaded) and
``reference()``, the output numpy computes from the same weights. ``small`` sizes are for
tests (each compiles in seconds).

| name | full size | small |
|---|---|---|
| ``mlp`` | 784-256-10, ReLU | 64-32-10 |
| ``encoder`` | BERT-base layer: hidden 768, 12 heads, seq 128, GELU FFN 3072 | 64, 4, 16, 128 |
| ``decoder`` | Llama block: hidden 512, 8 heads, seq 64, SiLU-gated FFN 1376 | 64, 4, 16, 176 |
| ``resnet`` | two basic blocks, 64 channels at 56x56, NCHW, BN folded | 8 channels at 8x8 |
"""

from __future__ import annotations

from typing import Callable

from tvm_ext.workloads.model_base import ENTRY, SIZES, Model, check_inputs
from tvm_ext.workloads.models_feedforward import MLP, RESNET, mlp, resnet
from tvm_ext.workloads.models_transformer import (
    DECODER,
    ENCODER,
    decoder,
    decoder_cache,
    decoder_reference,
    decoder_step,
    encoder,
    rope_tables,
)

ZOO: dict[str, Callable[..., Model]] = {
    "mlp": mlp,
    "encoder": encoder,
    "decoder": decoder,
    "resnet": resnet,
}


def build(name: str, size: str = "full", batch: int = 1, seed: int = 0) -> Model:
    """The zoo model ``name``; raises ValueError naming the zoo when there is none."""
    if name not in ZOO:
        raise ValueError(f"no model {name!r} in the zoo; it has {sorted(ZOO)}")
    return ZOO[name](size=size, batch=batch, seed=seed)


__all__ = [
    "DECODER",
    "ENCODER",
    "ENTRY",
    "MLP",
    "RESNET",
    "SIZES",
    "ZOO",
    "Model",
    "build",
    "check_inputs",
    "decoder",
    "decoder_cache",
    "decoder_reference",
    "decoder_step",
    "encoder",
    "mlp",
    "resnet",
    "rope_tables",
]
