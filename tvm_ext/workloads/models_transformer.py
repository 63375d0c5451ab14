"""Transformer zoo models: a BERT-style encoder layer and a Llama-style decoder block.

Both take hidden states (the embeddings are left out: a gather is no kernel worth scheduling)
and are written the way their reference implementations write them, so the Relax module holds
the kernels a real model gives: the encoder spells attention out (matmul, scale, softmax,
matmul) as BERT does; the decoder calls ``scaled_dot_product_attention`` with a causal mask as
Llama's SDPA path does, after rotary position embeddings.

:func:`decoder_step` is the decoder block's decode step (its weights, one token against a
KV cache of symbolic length read in place), the zoo's twin of ``build_decode``'s Llama step.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from tvm_ext.base import tvm_api
from tvm_ext.workloads.model_base import (
    Model,
    check_size,
    gelu,
    layer_norm,
    linear,
    make_model,
    rms_norm,
    silu,
    softmax,
)

nn = tvm_api.relax_nn


@dataclass(frozen=True)
class Shape:
    """Sizes of one transformer layer."""

    hidden: int
    heads: int
    seq: int
    ffn: int

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


ENCODER = {"full": Shape(768, 12, 128, 3072), "small": Shape(64, 4, 16, 128)}  # BERT-base
DECODER = {"full": Shape(512, 8, 64, 1376), "small": Shape(64, 4, 16, 176)}
LN_EPS = 1e-12  # BERT's
RMS_EPS = 1e-5
ROPE_THETA = 10000.0


def _split_heads(t, b: int, shape: Shape):
    """(b, s, hidden) -> (b, heads, s, head_dim)."""
    return nn.op.permute_dims(
        nn.op.reshape(t, (b, shape.seq, shape.heads, shape.head_dim)), [0, 2, 1, 3]
    )


class _EncoderLayer(nn.Module):
    def __init__(self, shape: Shape):
        h = shape.hidden
        self.shape = shape
        self.query, self.key, self.value = nn.Linear(h, h), nn.Linear(h, h), nn.Linear(h, h)
        self.attn_out = nn.Linear(h, h)
        self.attn_norm = nn.LayerNorm(h, eps=LN_EPS)
        self.ffn_in, self.ffn_out = nn.Linear(h, shape.ffn), nn.Linear(shape.ffn, h)
        self.ffn_norm = nn.LayerNorm(h, eps=LN_EPS)

    def forward(self, x):
        s, b = self.shape, int(x.shape[0])
        q, k, v = (_split_heads(f(x), b, s) for f in (self.query, self.key, self.value))
        scores = nn.op.matmul(q, nn.op.permute_dims(k, [0, 1, 3, 2])) * (
            1.0 / math.sqrt(s.head_dim)
        )
        ctx = nn.op.matmul(nn.op.softmax(scores, axis=-1), v)
        ctx = nn.op.reshape(nn.op.permute_dims(ctx, [0, 2, 1, 3]), (b, s.seq, s.hidden))
        x = self.attn_norm(x + self.attn_out(ctx))
        return self.ffn_norm(x + self.ffn_out(nn.op.gelu(self.ffn_in(x))))


def _encoder_np(w: dict[str, np.ndarray], x: np.ndarray, heads: int) -> np.ndarray:
    b, seq, hidden = x.shape
    d = hidden // heads

    def split(t):
        return t.reshape(b, seq, heads, d).transpose(0, 2, 1, 3)

    q, k, v = (split(linear(x, w, n)) for n in ("query", "key", "value"))
    p = softmax(q @ k.transpose(0, 1, 3, 2) / math.sqrt(d))
    ctx = (p @ v).transpose(0, 2, 1, 3).reshape(b, seq, hidden)
    x = layer_norm(x + linear(ctx, w, "attn_out"), w, "attn_norm", LN_EPS)
    ffn = linear(gelu(linear(x, w, "ffn_in")), w, "ffn_out")
    return layer_norm(x + ffn, w, "ffn_norm", LN_EPS)


def encoder(size: str = "full", batch: int = 1, seed: int = 0) -> Model:
    """A BERT encoder layer (post-norm attention, erf-GELU FFN) on (batch, seq, hidden)."""
    check_size(size, batch)
    s = ENCODER[size]
    flops = 2 * batch * s.seq * (4 * s.hidden**2 + 2 * s.hidden * s.ffn + 2 * s.seq * s.hidden)

    def forward_np(w, inputs):
        return _encoder_np(w, inputs[0], s.heads)

    return make_model(
        "encoder",
        size,
        batch,
        seed,
        _EncoderLayer(s),
        {"x": (batch, s.seq, s.hidden)},
        flops,
        forward_np,
    )


def rope_tables(seq: int, head_dim: int) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of rotary embeddings, (seq, 1, head_dim), halves repeated (Llama's layout)."""
    inv_freq = 1.0 / ROPE_THETA ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    angles = np.outer(np.arange(seq, dtype=np.float64), inv_freq)
    angles = np.concatenate([angles, angles], axis=-1)[:, None, :]
    return np.cos(angles), np.sin(angles)


class _DecoderBlock(nn.Module):
    def __init__(self, shape: Shape):
        h, f = shape.hidden, shape.ffn
        self.shape = shape
        self.input_norm = nn.RMSNorm(h, axes=-1, epsilon=RMS_EPS, bias=False)
        self.q_proj, self.k_proj = nn.Linear(h, h, bias=False), nn.Linear(h, h, bias=False)
        self.v_proj, self.o_proj = nn.Linear(h, h, bias=False), nn.Linear(h, h, bias=False)
        self.post_norm = nn.RMSNorm(h, axes=-1, epsilon=RMS_EPS, bias=False)
        self.gate_proj, self.up_proj = nn.Linear(h, f, bias=False), nn.Linear(h, f, bias=False)
        self.down_proj = nn.Linear(f, h, bias=False)

    def _rope(self, t):
        # Positions are fixed by the static sequence length, so the tables are constants.
        cos, sin = rope_tables(self.shape.seq, self.shape.head_dim)
        first, second = nn.op.split(t, 2, axis=-1)
        rotated = nn.op.concat([nn.op.negative(second), first], dim=-1)
        cos_t = nn.Tensor.from_const(cos.astype(np.float32))
        sin_t = nn.Tensor.from_const(sin.astype(np.float32))
        return t * cos_t + rotated * sin_t

    def forward(self, x):
        s, b = self.shape, int(x.shape[0])
        h = self.input_norm(x)

        def heads(t):  # (b, s, hidden) -> (b, s, heads, head_dim): SDPA's layout
            return nn.op.reshape(t, (b, s.seq, s.heads, s.head_dim))

        q, k = self._rope(heads(self.q_proj(h))), self._rope(heads(self.k_proj(h)))
        attn = nn.op.scaled_dot_product_attention(q, k, heads(self.v_proj(h)), is_causal=True)
        x = x + self.o_proj(nn.op.reshape(attn, (b, s.seq, s.hidden)))
        h = self.post_norm(x)
        return x + self.down_proj(nn.op.silu(self.gate_proj(h)) * self.up_proj(h))


def decoder_reference(w: dict[str, np.ndarray], x: np.ndarray, heads: int) -> np.ndarray:
    """The decoder block in numpy over hidden states ``x`` of any length (``(b, seq,
    hidden)``), causal: the block's reference, and a decode step's full recompute."""
    b, seq, hidden = x.shape
    d = hidden // heads
    cos, sin = rope_tables(seq, d)

    def rope(t):  # t: (b, s, heads, d)
        return t * cos + np.concatenate([-t[..., d // 2 :], t[..., : d // 2]], axis=-1) * sin

    h = rms_norm(x, w["input_norm.weight"], RMS_EPS)
    q, k, v = (linear(h, w, n).reshape(b, seq, heads, d) for n in ("q_proj", "k_proj", "v_proj"))
    q, k, v = rope(q).transpose(0, 2, 1, 3), rope(k).transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d)
    scores = np.where(np.tril(np.ones((seq, seq), dtype=bool)), scores, -np.inf)
    ctx = (softmax(scores) @ v).transpose(0, 2, 1, 3).reshape(b, seq, hidden)
    x = x + linear(ctx, w, "o_proj")
    h = rms_norm(x, w["post_norm.weight"], RMS_EPS)
    return x + linear(silu(linear(h, w, "gate_proj")) * linear(h, w, "up_proj"), w, "down_proj")


def decoder(size: str = "full", batch: int = 1, seed: int = 0) -> Model:
    """A Llama decoder block (RMSNorm, RoPE, causal attention, SiLU-gated MLP, no biases)."""
    check_size(size, batch)
    s = DECODER[size]
    flops = 2 * batch * s.seq * (4 * s.hidden**2 + 3 * s.hidden * s.ffn + 2 * s.seq * s.hidden)

    def forward_np(w, inputs):
        return decoder_reference(w, inputs[0], s.heads)

    return make_model(
        "decoder",
        size,
        batch,
        seed,
        _DecoderBlock(s),
        {"x": (batch, s.seq, s.hidden)},
        flops,
        forward_np,
    )


class _DecoderStep(_DecoderBlock):
    """The decoder block's decode step: the token's hidden state ``(1, 1, hidden)`` and the
    cache's keys and values ``(n, heads, head_dim)`` (sequence-major, ``n`` symbolic) in; the
    token's output and its own row of the cache ``(1, 2, heads, head_dim)`` out. The same
    layers (and so the same weights for a seed) as the block; rotary tables of ``longest``
    positions, sliced at ``n``."""

    def __init__(self, shape: Shape, longest: int):
        super().__init__(shape)
        self.longest = longest

    def forward(self, x, keys, values):
        s, relax = self.shape, tvm_api.relax
        n = keys.shape[0]
        cos, sin = (
            nn.Tensor.from_const(t[:, 0].astype(np.float32))
            for t in rope_tables(self.longest, s.head_dim)
        )

        def part(t, axis: int, begin, end, name: str):  # inside: n <= max_cache < longest
            sliced = relax.op.strided_slice(t._expr, [axis], [begin], [end], assume_inbound=True)
            return nn.op.wrap_nested(sliced, name)

        def at_n(table):  # the table's row for position n, (1, head_dim)
            return part(table, 0, n, n + 1, "row")

        def rope(t):  # (heads, head_dim) at position n
            first, second = nn.op.split(t, 2, axis=-1)
            return t * at_n(cos) + nn.op.concat([nn.op.negative(second), first], dim=-1) * at_n(sin)

        def heads(t):
            return nn.op.reshape(t, (s.heads, s.head_dim))

        h = self.input_norm(x)
        q = rope(heads(self.q_proj(h))) * (1.0 / math.sqrt(s.head_dim))
        key, value = rope(heads(self.k_proj(h))), heads(self.v_proj(h))

        def einsum(spec, a, b):
            return nn.op.wrap_nested(relax.op.einsum([a._expr, b._expr], spec), "einsum")

        own = nn.op.sum(q * key, axis=-1, keepdims=True)  # the token's score against itself
        weights = nn.op.softmax(nn.op.concat([einsum("hd,nhd->hn", q, keys), own], dim=-1), -1)
        cached, mine = part(weights, 1, 0, n, "cached"), part(weights, 1, n, n + 1, "own")
        attn = einsum("hn,nhd->hd", cached, values) + mine * value
        x = x + self.o_proj(nn.op.reshape(attn, (1, 1, s.hidden)))
        h = self.post_norm(x)
        out = x + self.down_proj(nn.op.silu(self.gate_proj(h)) * self.up_proj(h))
        return out, nn.op.reshape(nn.op.concat([key, value], dim=0), (1, 2, s.heads, s.head_dim))


def decoder_cache(w: dict[str, np.ndarray], x: np.ndarray, heads: int) -> np.ndarray:
    """The decoder block's KV cache after the hidden states ``x`` (``(1, n, hidden)``):
    ``(1, 2, n, heads, head_dim)``, keys (rotated) then values, as a decode step reads it."""
    _, seq, hidden = x.shape
    d = hidden // heads
    cos, sin = rope_tables(seq, d)
    h = rms_norm(x[0], w["input_norm.weight"], RMS_EPS)
    k, v = (linear(h, w, name).reshape(seq, heads, d) for name in ("k_proj", "v_proj"))
    k = k * cos + np.concatenate([-k[..., d // 2 :], k[..., : d // 2]], axis=-1) * sin
    return np.stack([k, v])[None]


def _decoder_step_np(w, x, keys, values, heads: int) -> list[np.ndarray]:
    """The step in numpy: the block over the cache's positions and the token's, for the token."""
    n, d = keys.shape[0], keys.shape[2]
    cos, sin = (t[n] for t in rope_tables(n + 1, d))

    def rope(t):
        return t * cos + np.concatenate([-t[..., d // 2 :], t[..., : d // 2]], axis=-1) * sin

    h = rms_norm(x[0], w["input_norm.weight"], RMS_EPS)
    q, k, v = (linear(h, w, name).reshape(heads, d) for name in ("q_proj", "k_proj", "v_proj"))
    q, k = rope(q), rope(k)
    all_k, all_v = np.concatenate([keys, k[None]]), np.concatenate([values, v[None]])
    p = softmax(np.einsum("hd,nhd->hn", q, all_k) / math.sqrt(d))
    x = x + linear(np.einsum("hn,nhd->hd", p, all_v).reshape(1, 1, -1), w, "o_proj")
    h = rms_norm(x, w["post_norm.weight"], RMS_EPS)
    out = x + linear(silu(linear(h, w, "gate_proj")) * linear(h, w, "up_proj"), w, "down_proj")
    return [out, np.stack([k, v])[None]]


def decoder_step(size: str = "full", cache: int = 64, max_cache: int = 2048, seed: int = 0):
    """The decoder block (weights of ``decoder(size, seed=seed)``) as a decode step against a
    KV cache of symbolic length in ``[1, max_cache]``; the example cache holds ``cache``
    random tokens' keys and values."""
    check_size(size, 1)
    if not 1 <= cache <= max_cache:
        raise ValueError(f"need 1 <= cache <= max_cache, got {cache=}, {max_cache=}")
    s = DECODER[size]
    rng = np.random.default_rng([seed, 1, 1])
    x = rng.standard_normal((1, 1, s.hidden))
    keys, values = rng.standard_normal((2, cache, s.heads, s.head_dim))
    flops = 2 * (4 * s.hidden**2 + 3 * s.hidden * s.ffn + 2 * cache * s.hidden)

    def forward_np(w, inputs):
        return _decoder_step_np(w, *inputs, s.heads)

    model = make_model(
        "decoder_step",
        size,
        1,
        seed,
        _DecoderStep(s, max_cache + 1),
        {
            "x": (1, 1, s.hidden),
            "keys": ("n", s.heads, s.head_dim),  # n: the cache length, symbolic
            "values": ("n", s.heads, s.head_dim),
        },
        flops,
        forward_np,
        inputs=[x, keys, values],
    )
    entry = tvm_api.relax_entry(model.mod)
    mod = tvm_api.with_upper_bounds(model.mod, entry, {"n": max_cache})
    mod[entry] = mod[entry].with_attr("tir_var_lower_bound", {"n": 1})
    return dataclasses.replace(model, mod=mod)
