"""One decode step of the suite's Llama against a KV cache of symbolic length.

:func:`build_decode` gives a :class:`~tvm_ext.workloads.from_torch.TorchModel` of the step a
generating model runs per token: the new token's id and the cache of the ``n`` tokens before
it go in; the token's last hidden state and the cache of ``n + 1`` tokens come out. ``n`` is
a symbolic dimension (``torch.export``'s ``Dim("cache", min=2, max=max_cache)``), so one
compiled executable serves every cache length.

The step runs the library's own layers (``LlamaDecoderLayer``, its attention, rotary
embedding, RMSNorm and MLP, the same weights as ``build_suite("llama", size)``) with a cache
object of our own whose ``update`` appends the step's keys and values to the cache passed in:
the attention is transformers' code, not a copy. The cache is one tensor, ``(layers, 2,
kv_heads, n, head_dim)`` (keys then values, per layer), its position the cache length.

:func:`prefill_cache` computes a cache with transformers' own ``DynamicCache`` (a prefill of
``ids`` through ``LlamaModel``), in this layout: the reference a step is checked against is a
full recompute over the prefix and the token.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tvm_ext.base import tvm_api
from tvm_ext.workloads import torch_libraries
from tvm_ext.workloads.from_torch import TorchModel, from_torch
from tvm_ext.workloads.model_base import SIZES
from tvm_ext.workloads.suite import SUITE


def _decode_module(llama):
    """``llama`` (a transformers ``LlamaModel``) as a decode step module (see above)."""
    torch = torch_libraries.torch()

    class _AppendCache:
        """The one method of transformers' ``Cache`` a layer's attention calls: ``update``
        returns the cache with the step's keys and values appended, and keeps them."""

        def __init__(self, past):
            self.past, self.new = past, {}

        def update(self, keys, values, layer_idx, *args, **kwargs):
            old = self.past[layer_idx]
            keys = torch.cat([old[0].unsqueeze(0), keys], dim=2)
            values = torch.cat([old[1].unsqueeze(0), values], dim=2)
            self.new[layer_idx] = (keys, values)
            return keys, values

    class DecodeStep(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, cache):
            inner = self.inner
            hidden = inner.embed_tokens(input_ids)
            position = torch.arange(cache.shape[3], cache.shape[3] + 1).unsqueeze(0)
            rotary = inner.rotary_emb(hidden, position)
            appended = _AppendCache(cache)
            for layer in inner.layers:
                hidden = layer(hidden, attention_mask=None, position_ids=position,
                               cache=appended, position_embeddings=rotary)  # fmt: skip
            new = [torch.cat(appended.new[i], dim=0) for i in range(len(inner.layers))]
            return inner.norm(hidden), torch.stack(new)

    return DecodeStep(llama)


def _llama(size: str, seed: int):
    torch = torch_libraries.torch()
    torch.manual_seed(seed)
    module, _ = SUITE["llama"][1](size, None)  # the suite's weights for this seed
    return module.inner.eval()


def prefill_cache(llama, ids: np.ndarray) -> np.ndarray:
    """The KV cache after ``ids`` (shape ``(1, n)``), from transformers' own prefill (a
    ``DynamicCache``), in the step's layout ``(layers, 2, kv_heads, n, head_dim)``."""
    torch = torch_libraries.torch()
    tr = torch_libraries.transformers()
    cache = tr.DynamicCache(config=llama.config)
    with torch.no_grad():
        llama(input_ids=torch.from_numpy(np.asarray(ids)), cache=cache, use_cache=True)
    layers = [torch.stack([layer.keys[0], layer.values[0]]) for layer in cache.layers]
    return torch.stack(layers).numpy()


def build_decode(
    size: str = "full",
    cache: int = 128,
    max_cache: int = 2048,
    seed: int = 0,
    *,
    symbolic: bool = True,
) -> TorchModel:
    """The suite's Llama (``size``, weights from ``seed``) as one decode step against a cache
    of symbolic length in ``[2, max_cache]`` (of exactly ``cache`` tokens when not
    ``symbolic``); the example inputs are a token and the cache a prefill of ``cache`` random
    ids leaves (see :func:`prefill_cache`)."""
    if size not in SIZES:
        raise ValueError(f"{size=} must be one of {SIZES}")
    if not 2 <= cache <= max_cache:
        raise ValueError(f"need 2 <= cache <= max_cache, got {cache=}, {max_cache=}")
    torch = torch_libraries.torch()
    llama = _llama(size, seed)
    rng = np.random.default_rng(seed)
    vocab = llama.config.vocab_size
    past = prefill_cache(llama, rng.integers(0, vocab, (1, cache)).astype(np.int64))
    token = rng.integers(0, vocab, (1, 1)).astype(np.int64)
    # Dim.DYNAMIC, not Dim("cache", max=...): with 3 query heads per KV head, torch.export
    # cannot prove a guard its own repeat_kv raises (min(64 + 64 n, 192 + 192 n) == 64 + 64 n)
    # over a declared range and refuses the Dim; the range is declared on the Relax side.
    dynamic = {"input_ids": None, "cache": {3: torch.export.Dim.DYNAMIC}} if symbolic else None
    model = from_torch(_decode_module(llama), [token, past], name="llama_decode", size=size,
                       seed=seed, dynamic_shapes=dynamic)  # fmt: skip
    if not symbolic:
        return model
    entry = tvm_api.relax_entry(model.mod)
    (name,) = tvm_api.symbolic_bounds(model.mod[entry])
    bounded = tvm_api.with_upper_bounds(model.mod, entry, {name: max_cache})
    return dataclasses.replace(model, mod=bounded)


__all__ = ["build_decode", "prefill_cache"]
