"""The real-model suite: the models users bring, built from torchvision and transformers
themselves with seeded random weights (nothing is downloaded), imported by
:func:`~tvm_ext.workloads.from_torch.from_torch`.

``build_suite(name, size="full" | "small", seed=0)`` gives a
:class:`~tvm_ext.workloads.from_torch.TorchModel`, batch 1. ``small`` keeps each model's
structure (its kinds of layers and their order) with fewer layers and smaller images, for
tests.

| name | library | full size | small |
|---|---|---|---|
| ``resnet18`` | torchvision | 224x224 | 32x32 |
| ``resnet50`` | torchvision | 224x224 | 32x32 |
| ``mobilenet_v2`` | torchvision | 224x224 | 32x32 |
| ``vit_b_16`` | torchvision | 224x224, 12 layers, hidden 768 | 32x32, 2 layers, 64 |
| ``bert`` | ``BertModel`` | bert-base: 12 layers, 768, seq 128 | 2 layers, 64, seq 16 |
| ``gpt2`` | ``GPT2Model`` | gpt2: 12 layers, 768, seq 128 | 2 layers, 64, seq 16 |
| ``llama`` | ``LlamaModel`` | ~110M: 12 layers, 768, FFN 2048, seq 128 | 2 layers, 64, seq 16 |

Weights: the libraries' own initialisation from ``torch.manual_seed(seed)``, then every weight
the library leaves at zero (ViT's classification head) drawn small and every BatchNorm's
running statistics drawn away from (0, 1), so no layer is an identity and parity tests the
whole graph. The language models run without a KV cache (``use_cache=False``), eager
attention, and return their last hidden state; ids are drawn from the vocabulary.

A language model takes ``seq=`` (the example's length, default the table's) and
``max_seq=``: the sequence length is then a symbolic dimension (``torch.export``'s
``Dim("seq", min=2, max=max_seq)``), and one compiled executable serves every length in
that range.
"""

from __future__ import annotations

from typing import Callable

from tvm_ext.workloads import torch_libraries
from tvm_ext.workloads.from_torch import TorchModel, from_torch
from tvm_ext.workloads.model_base import SIZES

DEFAULT_SEQ = {"full": 128, "small": 16}  # the language models' example length

# name -> (library, builder(size, seq) -> (torch module, example inputs)); seq is None for the
# default length, and only the language models take one
Builder = Callable[[str, "int | None"], tuple]


def _image(size: str, full: int = 224, small: int = 32):
    torch = torch_libraries.torch()
    side = full if size == "full" else small
    return (torch.randn(1, 3, side, side),)


def _torchvision_model(arch: str) -> Builder:
    def build(size: str, seq: int | None = None):
        models = torch_libraries.torchvision().models
        if arch == "vit_b_16" and size == "small":
            module = models.VisionTransformer(image_size=32, patch_size=16, num_layers=2,
                                              num_heads=4, hidden_dim=64, mlp_dim=128)  # fmt: skip
        else:
            module = getattr(models, arch)()
        return module, _image(size)

    return build


def _last_hidden(model):
    """``model`` (a transformers model) returning its last hidden state alone."""
    torch = torch_libraries.torch()

    class LastHidden(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids):
            return self.inner(input_ids=input_ids).last_hidden_state

    return LastHidden(model)


def _language_model(kind: str) -> Builder:
    def build(size: str, seq: int | None = None):
        tr = torch_libraries.transformers()
        torch = torch_libraries.torch()
        full = size == "full"
        seq = seq or DEFAULT_SEQ[size]
        layers, hidden, heads = (12, 768, 12) if full else (2, 64, 4)
        common = {"attn_implementation": "eager"}
        if kind == "bert":
            config = tr.BertConfig(num_hidden_layers=layers, hidden_size=hidden,
                                   num_attention_heads=heads, intermediate_size=4 * hidden,
                                   **common)  # fmt: skip
            model = tr.BertModel(config, add_pooling_layer=False)
        elif kind == "gpt2":
            config = tr.GPT2Config(n_layer=layers, n_embd=hidden, n_head=heads, use_cache=False,
                                   **common)  # fmt: skip
            model = tr.GPT2Model(config)
        else:
            config = tr.LlamaConfig(num_hidden_layers=layers, hidden_size=hidden,
                                    num_attention_heads=heads, num_key_value_heads=heads // 3 or 1,
                                    intermediate_size=2048 if full else 172, use_cache=False,
                                    vocab_size=32000, max_position_embeddings=2048,
                                    **common)  # fmt: skip
            model = tr.LlamaModel(config)
        ids = torch.randint(0, config.vocab_size, (1, seq), dtype=torch.int64)
        return _last_hidden(model), (ids,)

    return build


SUITE: dict[str, tuple[str, Builder]] = {
    "resnet18": ("torchvision", _torchvision_model("resnet18")),
    "resnet50": ("torchvision", _torchvision_model("resnet50")),
    "mobilenet_v2": ("torchvision", _torchvision_model("mobilenet_v2")),
    "vit_b_16": ("torchvision", _torchvision_model("vit_b_16")),
    "bert": ("transformers", _language_model("bert")),
    "gpt2": ("transformers", _language_model("gpt2")),
    "llama": ("transformers", _language_model("llama")),
}


def build_suite(
    name: str,
    size: str = "full",
    seed: int = 0,
    *,
    seq: int | None = None,
    max_seq: int | None = None,
) -> TorchModel:
    """The suite model ``name`` at ``size``, its weights from ``seed``; a language model at
    ``seq`` tokens, symbolic in its length up to ``max_seq`` when given (see the module's
    docstring). ValueError naming the suite when there is no such model, or when ``seq`` or
    ``max_seq`` is given for an image model or out of range."""
    if name not in SUITE:
        raise ValueError(f"no model {name!r} in the suite; it has {sorted(SUITE)}")
    if size not in SIZES:
        raise ValueError(f"{size=} must be one of {SIZES}")
    library, builder = SUITE[name]
    if (seq or max_seq) and library != "transformers":
        languages = sorted(k for k, v in SUITE.items() if v[0] == "transformers")
        raise ValueError(f"{name} takes no sequence length (seq=, max_seq= are for {languages})")
    if max_seq is not None and seq is None:
        seq = min(DEFAULT_SEQ[size], max_seq)
    if (seq is not None and seq < 2) or (max_seq is not None and max_seq < max(seq or 2, 2)):
        raise ValueError(f"need 2 <= seq <= max_seq, got {seq=}, {max_seq=}")
    torch = torch_libraries.torch()
    torch.manual_seed(seed)
    module, inputs = builder(size, seq)
    _no_identities(torch, module, seed)
    dynamic = None
    if max_seq is not None:
        dynamic = {"input_ids": {1: torch.export.Dim("seq", min=2, max=max_seq)}}
    return from_torch(module, inputs, name=name, size=size, seed=seed, dynamic_shapes=dynamic)


def _no_identities(torch, module, seed: int) -> None:
    """Draw the weights a library leaves at zero, and BatchNorm running statistics, so that
    every layer computes something (see the module's docstring)."""
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for parameter in module.parameters():
            if parameter.ndim >= 2 and not parameter.any():
                parameter.copy_(0.02 * torch.randn(parameter.shape, generator=generator))
        for layer in module.modules():
            if isinstance(layer, torch.nn.modules.batchnorm._BatchNorm):
                shape = layer.running_mean.shape
                layer.running_mean.copy_(0.1 * torch.randn(shape, generator=generator))
                layer.running_var.copy_(0.5 + torch.rand(shape, generator=generator))


__all__ = ["SUITE", "build_suite"]
