"""One decode step of the suite's Llama, reading its KV cache in place.

:func:`build_decode` gives a :class:`~tvm_ext.workloads.from_torch.TorchModel` of the step a
generating model runs per token. In: the new token's id and, per layer, the keys and the
values of the ``n`` tokens before it (``2 x layers`` inputs of ``(n, kv_heads, head_dim)``,
sequence-major: keys of layer 0, values of layer 0, keys of layer 1, ...). Out: the token's
last hidden state and its own keys and values, ``(layers, 2, kv_heads, head_dim)``. ``n`` is
a symbolic dimension (``torch.export``'s ``Dim("cache")``), so one compiled executable
serves every cache length.

The step only reads the cache and returns one new row of it: the cache grows in place, not by
a copy a step. :class:`~tvm_ext.model_pipeline.decode_session.DecodeSession` keeps it in
buffers of a fixed capacity, passes the first ``n`` rows of each as views (sequence-major, so
a prefix is contiguous) and writes the step's row into row ``n``. (Before, the step
concatenated the token's keys and values to the whole cache and returned the grown cache:
three whole-cache copies a step, plus the grouped-query repeat; at 1024 cached tokens 27.7
ms a step against 13.3 with the cache read in place, Xeon, 2 threads, side by side.)

The step runs transformers' own layers (``LlamaDecoderLayer``: its norms, projections,
rotary embedding and MLP, the weights of ``build_suite("llama", size)``) with one attention
function of ours, registered with transformers' ``AttentionInterface`` (:data:`ATTENTION`):
the query against the cache and against the token apart (``einsum`` over the cache as it
lies, grouped-query heads included, with no repeat), one softmax over both, and the values
likewise. :func:`prefill_cache` computes a cache with transformers' own ``DynamicCache`` and
eager attention (a prefill of ``ids`` through ``LlamaModel``): the reference a step is
checked against is a full recompute over the prefix and the token.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tvm_ext.base import tvm_api
from tvm_ext.workloads import torch_libraries
from tvm_ext.workloads.from_torch import TorchModel, from_torch
from tvm_ext.workloads.model_base import SIZES
from tvm_ext.workloads.suite import SUITE

# The name the step's attention is registered under with transformers' AttentionInterface.
ATTENTION = "tvm_ext_cache_in_place"


def _attention(module, query, key, value, attention_mask, *, scaling, past, **_):
    """One query token's attention over ``past`` (the cache's keys and values, ``(n,
    kv_heads, head_dim)`` each, then a list the token's own ``key`` and ``value`` are
    appended to, ``(1, kv_heads, 1, head_dim)`` each, as the layer computed them: the cache's
    new row) and over the token itself: transformers' attention-function interface, its
    output ``(1, 1, heads, head_dim)``."""
    torch = torch_libraries.torch()
    keys, values, new_rows = past
    new_rows.append((key, value))
    kv_heads, dim = keys.shape[1], keys.shape[2]
    heads = query.shape[1]
    q = query.reshape(kv_heads, heads // kv_heads, dim) * scaling
    own = (q * key.reshape(kv_heads, 1, dim)).sum(-1, keepdim=True)
    scores = torch.cat([torch.einsum("kgd,nkd->kgn", q, keys), own], dim=-1)
    weights = torch.softmax(scores, dim=-1)
    out = torch.einsum("kgn,nkd->kgd", weights[..., :-1], values)
    out = out + weights[..., -1:] * value.reshape(kv_heads, 1, dim)
    return out.reshape(1, 1, heads, dim), None


def _decode_module(llama):
    """``llama`` (a transformers ``LlamaModel``) as a decode step module (see above)."""
    torch = torch_libraries.torch()
    torch_libraries.transformers()  # made importable beside torchvision first
    from transformers.modeling_utils import AttentionInterface  # lazy: optional, heavy

    AttentionInterface.register(ATTENTION, _attention)

    class DecodeStep(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, *past):
            inner, config = self.inner, self.inner.config
            hidden = inner.embed_tokens(input_ids)
            length = past[0].shape[0]
            position = torch.arange(length, length + 1).unsqueeze(0)
            rotary = inner.rotary_emb(hidden, position)
            rows: list = []
            saved, config._attn_implementation = config._attn_implementation, ATTENTION
            try:
                for i, layer in enumerate(inner.layers):
                    hidden = layer(hidden, position_embeddings=rotary,
                                   past=(past[2 * i], past[2 * i + 1], rows))  # fmt: skip
            finally:
                config._attn_implementation = saved
            new = torch.stack([torch.stack([k.reshape(k.shape[1], -1), v.reshape(v.shape[1], -1)])
                               for k, v in rows])  # fmt: skip
            return inner.norm(hidden), new

    return DecodeStep(llama)


def _llama(size: str, seed: int):
    torch = torch_libraries.torch()
    torch.manual_seed(seed)
    module, _ = SUITE["llama"][1](size, None)  # the suite's weights for this seed
    return module.inner.eval()


def prefill_cache(llama, ids: np.ndarray) -> np.ndarray:
    """The KV cache after ``ids`` (shape ``(1, n)``), from transformers' own prefill (a
    ``DynamicCache``, eager attention), in the step's layout: ``(layers, 2, n, kv_heads,
    head_dim)``, ``[i, 0]`` layer ``i``'s keys, ``[i, 1]`` its values."""
    torch = torch_libraries.torch()
    tr = torch_libraries.transformers()
    cache = tr.DynamicCache(config=llama.config)
    with torch.no_grad():
        llama(input_ids=torch.from_numpy(np.asarray(ids)), cache=cache, use_cache=True)
    layers = [torch.stack([layer.keys[0], layer.values[0]]) for layer in cache.layers]
    return torch.stack(layers).permute(0, 1, 3, 2, 4).contiguous().numpy()


def cache_inputs(cache: np.ndarray) -> list[np.ndarray]:
    """A cache of :func:`prefill_cache`'s layout as the step's cache inputs: per layer, its
    keys then its values."""
    return [np.ascontiguousarray(cache[i, kind]) for i in range(cache.shape[0]) for kind in (0, 1)]


def build_decode(
    size: str = "full",
    cache: int = 128,
    max_cache: int = 2048,
    seed: int = 0,
    *,
    symbolic: bool = True,
) -> TorchModel:
    """The suite's Llama (``size``, weights from ``seed``) as one decode step against a cache
    of symbolic length up to ``max_cache`` (of exactly ``cache`` tokens when not
    ``symbolic``); the example inputs are a token and the cache a prefill of ``cache`` random
    ids leaves (see :func:`prefill_cache`)."""
    if size not in SIZES:
        raise ValueError(f"{size=} must be one of {SIZES}")
    if not 2 <= cache <= max_cache:
        raise ValueError(f"need 2 <= cache <= max_cache, got {cache=}, {max_cache=}")
    torch = torch_libraries.torch()
    llama = _llama(size, seed)
    rng = np.random.default_rng(seed)
    past = cache_inputs(prefill_cache(llama, rng.integers(0, llama.config.vocab_size, (1, cache))))
    token = rng.integers(0, llama.config.vocab_size, (1, 1)).astype(np.int64)
    length = torch.export.Dim("cache")  # one symbol for every layer's keys and values
    dynamic = {"input_ids": None, "past": tuple({0: length} for _ in past)} if symbolic else None
    model = from_torch(_decode_module(llama), [token, *past], name="llama_decode", size=size,
                       seed=seed, dynamic_shapes=dynamic)  # fmt: skip
    if not symbolic:
        return model
    entry = tvm_api.relax_entry(model.mod)
    (name,) = tvm_api.symbolic_bounds(model.mod[entry])
    bounded = tvm_api.with_upper_bounds(model.mod, entry, {name: max_cache})
    return dataclasses.replace(model, mod=bounded)


__all__ = ["ATTENTION", "build_decode", "cache_inputs", "prefill_cache"]
