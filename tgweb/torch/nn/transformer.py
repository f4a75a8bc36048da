"""torch.nn's attention modules: MultiheadAttention, the Transformer encoder and decoder
layers and stacks, and nn.Transformer, with PyTorch's arguments, parameter names and
layouts (in_proj_weight [3E, E]) and initialisation, on tgweb's fused attention
(tgweb.ops.attention: one kernel, no L x S weights stored).

Masks are PyTorch's: a bool attn_mask or key_padding_mask is True where attention is
NOT allowed, a float one is added to the scores; both become one additive mask. A
causal mask is recognised (from is_causal, or a host mask equal to
generate_square_subsequent_mask's) and becomes the kernel's is_causal, reading no mask
at all. The attention weights (need_weights=True) are computed apart, from the same
scores: a graph that does not use them never computes them. What differs: a query that
may attend to no key gives 0, where PyTorch gives NaN."""

from __future__ import annotations

import copy
import math

from ... import ops as _ops
from ...ir import TraceError, current_graph, user_site
from ...nn import init as _init
from .._host import HostTensor
from . import Dropout, LayerNorm, Linear, ModuleList, functional, init
from .module import Module

NEG_INF = float("-inf")


def _additive(mask, what: str):
    """A PyTorch mask as scores to add: bool True (not allowed) -> -inf, float as it is."""
    if mask is None:
        return None
    if mask.dtype == "bool":
        return _ops.where(mask, NEG_INF, 0.0)
    if mask.dtype != "f32":
        raise TraceError(f"MultiheadAttention: {what} must be bool or float, got {mask.dtype}", user_site())
    return mask


def _pad_last(mask):
    """An additive mask with one more key (a zero column: visible)."""
    return None if mask is None else _ops.pad(mask, mask.ndim - 1, 0, 1)


def _heads(x, n: int):
    """[B, L, E] -> [B, heads, L, E / heads] (a view the attention kernel reads through strides)."""
    b, length, e = x.shape
    return _ops.permute(_ops.reshape(x, (b, length, n, e // n)), (0, 2, 1, 3))


class MultiheadAttention(Module):
    """torch.nn.MultiheadAttention; forward(query, key, value, key_padding_mask=None,
    need_weights=True, attn_mask=None, average_attn_weights=True, is_causal=False) ->
    (attn_output, attn_weights or None)."""

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        add_bias_kv: bool = False,
        add_zero_attn: bool = False,
        kdim: int | None = None,
        vdim: int | None = None,
        batch_first: bool = False,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(
                f"MultiheadAttention: embed_dim {embed_dim} is not divisible by num_heads {num_heads}"
            )
        self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, embed_dim // num_heads
        self.kdim, self.vdim = kdim or embed_dim, vdim or embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.dropout, self.batch_first, self.add_zero_attn = float(dropout), bool(batch_first), add_zero_attn
        xavier = _init.xavier()
        if self._qkv_same_embed_dim:
            self.in_proj_weight = self.param((3 * embed_dim, embed_dim), xavier)
            self.q_proj_weight = self.k_proj_weight = self.v_proj_weight = None
        else:
            self.in_proj_weight = None
            self.q_proj_weight = self.param((embed_dim, embed_dim), xavier)
            self.k_proj_weight = self.param((embed_dim, self.kdim), xavier)
            self.v_proj_weight = self.param((embed_dim, self.vdim), xavier)
        self.in_proj_bias = self.param((3 * embed_dim,), _init.zeros()) if bias else None
        # before out_proj: PyTorch lists a module's own parameters before its children's
        std = math.sqrt(2.0 / (1 + embed_dim))  # xavier_normal_ of a [1, 1, E] tensor
        self.bias_k = self.param((1, 1, embed_dim), _init.normal(std)) if add_bias_kv else None
        self.bias_v = self.param((1, 1, embed_dim), _init.normal(std)) if add_bias_kv else None
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias)
        if bias:
            init.zeros_(self.out_proj.bias)

    def _projections(self, query, key, value):
        """q, k, v [B, L, E] from the [B, L, *] inputs: one product for self-attention."""
        e, b = self.embed_dim, self.in_proj_bias
        bias = (lambda j: None) if b is None else (lambda j: _ops.narrow(b, 0, j * e, e))  # noqa: E731
        if self._qkv_same_embed_dim and query is key and key is value:
            qkv = functional.linear(query, self.in_proj_weight, b)
            return _ops.split(qkv, e, -1)
        if self._qkv_same_embed_dim:
            ws = [_ops.narrow(self.in_proj_weight, 0, j * e, e) for j in range(3)]
        else:
            ws = [self.q_proj_weight, self.k_proj_weight, self.v_proj_weight]
        return [functional.linear(x, w, bias(j)) for j, (x, w) in enumerate(zip((query, key, value), ws))]

    def forward(
        self,
        query,
        key,
        value,
        key_padding_mask=None,
        need_weights: bool = True,
        attn_mask=None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ):
        batched = query.ndim == 3
        query, key, value = (self._batch_major(x, batched) for x in (query, key, value))
        b, length, _ = query.shape
        if is_causal and attn_mask is None:
            raise TraceError(
                "MultiheadAttention: is_causal=True needs attn_mask too (PyTorch's rule); "
                "use nn.Transformer.generate_square_subsequent_mask",
                user_site(),
            )
        attn_mask = _additive(attn_mask, "attn_mask")
        key_padding_mask = _additive(key_padding_mask, "key_padding_mask")
        q, k, v = self._projections(query, key, value)
        if self.bias_k is not None:  # a last key and value, seen by every query
            k, v = (
                _ops.concat([x, _ops.broadcast_to(bk, (b, 1, self.embed_dim))], 1)
                for x, bk in ((k, self.bias_k), (v, self.bias_v))
            )
            attn_mask, key_padding_mask = (_pad_last(m) for m in (attn_mask, key_padding_mask))
        q, k, v = (_heads(x, self.num_heads) for x in (q, k, v))
        if self.add_zero_attn:  # a last key and value of zeros in every head
            k, v = (_ops.pad(x, 2, 0, 1) for x in (k, v))
            attn_mask, key_padding_mask = (_pad_last(m) for m in (attn_mask, key_padding_mask))
        causal = is_causal and key_padding_mask is None and not need_weights
        mask = None if causal else self._mask(attn_mask, key_padding_mask, b, length, k.shape[2], batched)
        out, weights = self._attend(q, k, v, mask, causal, need_weights)
        out = self.out_proj(_ops.reshape(_ops.permute(out, (0, 2, 1, 3)), (b, length, self.embed_dim)))
        if weights is not None and average_attn_weights:
            weights = _ops.mean(weights, 1)
        return self._results(out, weights, batched)

    def _attend(self, q, k, v, mask, causal: bool, need_weights: bool):
        """(output [B, heads, L, D], the weights [B, heads, L, S] or None)."""
        p = self.dropout if self.training else 0.0
        if not need_weights:
            return _ops.scaled_dot_product_attention(q, k, v, mask, p, causal), None
        scores = _ops.matmul(q, _ops.transpose(k, -2, -1)) * (1.0 / math.sqrt(self.head_dim))
        weights = _ops.softmax(scores if mask is None else scores + mask, -1)
        if not p:  # the output from the fused kernel; the weights only if they are used
            return _ops.scaled_dot_product_attention(q, k, v, mask, 0.0, False), weights
        # the weights returned are the dropped ones the output is made of, as in PyTorch
        weights = _ops.dropout(weights, p, True)
        return _ops.matmul(weights, v), weights

    def _batch_major(self, x, batched: bool):
        if x.ndim != (3 if batched else 2):
            raise TraceError(
                f"MultiheadAttention: query, key and value must all be batched (3-D) or all "
                f"unbatched (2-D); got shape {tuple(x.shape)}",
                user_site(),
            )
        if not batched:
            return _ops.unsqueeze(x, 0)
        return x if self.batch_first else _ops.swapaxes(x, 0, 1)

    def _results(self, out, weights, batched: bool):
        if not batched:
            return _ops.squeeze(out, 0), None if weights is None else _ops.squeeze(weights, 0)
        return (out if self.batch_first else _ops.swapaxes(out, 0, 1)), weights

    def _mask(self, attn_mask, key_padding_mask, b: int, length: int, s: int, batched: bool):
        """One additive mask for the kernel, broadcast over [B, heads, L, S]."""
        a, k = attn_mask, key_padding_mask
        if a is not None:
            if a.ndim == 3:  # [B * heads, L, S]
                a = _ops.reshape(a, (b, self.num_heads, length, s))
            elif tuple(a.shape) != (length, s):
                raise TraceError(
                    f"MultiheadAttention: attn_mask must have shape ({length}, {s}) or "
                    f"({b * self.num_heads}, {length}, {s}), got {tuple(a.shape)}",
                    user_site(),
                )
        if k is not None:
            if tuple(k.shape) != ((b, s) if batched else (s,)):
                raise TraceError(
                    f"MultiheadAttention: key_padding_mask must have shape {(b, s) if batched else (s,)}, "
                    f"got {tuple(k.shape)}",
                    user_site(),
                )
            k = _ops.reshape(k, (b, 1, 1, s))
        if a is None or k is None:
            return a if k is None else k
        return a + k


# ---------------------------------------------------------------- masks


def generate_square_subsequent_mask(sz: int, device=None, dtype=None):
    """[sz, sz] float: -inf above the diagonal (a later key), 0 elsewhere; a host tensor
    outside forward, graph nodes inside."""
    from ... import torch as _torch

    return _torch.triu(_torch.full((sz, sz), NEG_INF), diagonal=1)


def _is_causal(mask, is_causal, size: int | None) -> bool:
    """PyTorch's test: the hint if given, else whether mask is the causal mask of its size.
    Only a mask made outside forward has values to compare; a traced one is used as a mask."""
    if is_causal is not None or mask is None:
        return bool(is_causal)
    if not isinstance(mask, HostTensor) or current_graph() is not None and mask.recipe is None:
        return False
    n = size or mask.shape[-2]
    if tuple(mask.shape) != (n, n) or mask.dtype != "f32":
        return False
    return all(
        (v == NEG_INF) if j > i else v == 0 for k, v in enumerate(mask.values) for i, j in [divmod(k, n)]
    )


def _activation(activation):
    if activation == "relu":
        return functional.relu
    if activation == "gelu":
        return functional.gelu
    if isinstance(activation, str):
        raise ValueError(f"activation should be 'relu' or 'gelu' (or a callable), not {activation!r}")
    return activation


# ---------------------------------------------------------------- layers


class _Layer(Module):
    """What the encoder and decoder layers share: the feed-forward block and the norms."""

    def _feed_forward_parts(
        self, d_model, dim_feedforward, dropout, activation, layer_norm_eps, norm_first, bias, norms
    ):
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias)
        self.norm_first = bool(norm_first)
        for k in range(1, norms + 1):
            setattr(self, f"norm{k}", LayerNorm(d_model, eps=layer_norm_eps, bias=bias))
        for k in range(1, norms + 1):
            setattr(self, f"dropout{k}", Dropout(dropout))
        self.activation = _activation(activation)

    def _ff_block(self, x, last_dropout):
        return last_dropout(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def _blocks(self, x, blocks):
        """Residual blocks [(norm, block)], the norm before (norm_first) or after each."""
        for norm, block in blocks:
            x = x + block(norm(x)) if self.norm_first else norm(x + block(x))
        return x


class TransformerEncoderLayer(_Layer):
    """Self-attention and a feed-forward block, each residual with a LayerNorm after (or,
    norm_first, before); forward(src, src_mask=None, src_key_padding_mask=None, is_causal=False)."""

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation="relu",
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        self.self_attn = MultiheadAttention(
            d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first
        )
        self._feed_forward_parts(
            d_model, dim_feedforward, dropout, activation, layer_norm_eps, norm_first, bias, 2
        )

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal: bool = False):
        def sa(x):
            y = self.self_attn(
                x,
                x,
                x,
                attn_mask=src_mask,
                key_padding_mask=src_key_padding_mask,
                need_weights=False,
                is_causal=is_causal,
            )[0]
            return self.dropout1(y)

        return self._blocks(src, [(self.norm1, sa), (self.norm2, lambda x: self._ff_block(x, self.dropout2))])


class TransformerDecoderLayer(_Layer):
    """Self-attention, attention over the memory, and a feed-forward block; forward(tgt,
    memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
    memory_key_padding_mask=None, tgt_is_causal=False, memory_is_causal=False)."""

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation="relu",
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        self.self_attn = MultiheadAttention(
            d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first
        )
        self.multihead_attn = MultiheadAttention(
            d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first
        )
        self._feed_forward_parts(
            d_model, dim_feedforward, dropout, activation, layer_norm_eps, norm_first, bias, 3
        )

    def forward(
        self,
        tgt,
        memory,
        tgt_mask=None,
        memory_mask=None,
        tgt_key_padding_mask=None,
        memory_key_padding_mask=None,
        tgt_is_causal: bool = False,
        memory_is_causal: bool = False,
    ):
        def sa(x):
            y = self.self_attn(
                x,
                x,
                x,
                attn_mask=tgt_mask,
                key_padding_mask=tgt_key_padding_mask,
                need_weights=False,
                is_causal=tgt_is_causal,
            )[0]
            return self.dropout1(y)

        def mha(x):
            y = self.multihead_attn(
                x,
                memory,
                memory,
                attn_mask=memory_mask,
                key_padding_mask=memory_key_padding_mask,
                need_weights=False,
                is_causal=memory_is_causal,
            )[0]
            return self.dropout2(y)

        blocks = [
            (self.norm1, sa),
            (self.norm2, mha),
            (self.norm3, lambda x: self._ff_block(x, self.dropout3)),
        ]
        return self._blocks(tgt, blocks)


def _clones(layer, n: int) -> ModuleList:
    """n deep copies of layer (PyTorch's: they start equal)."""
    return ModuleList([copy.deepcopy(layer) for _ in range(n)])


def _seq_len(x, batch_first: bool):
    return x.shape[1] if x.ndim == 3 and batch_first else x.shape[0]


class TransformerEncoder(Module):
    """num_layers copies of encoder_layer, then norm; forward(src, mask=None,
    src_key_padding_mask=None, is_causal=None)."""

    def __init__(
        self,
        encoder_layer,
        num_layers: int,
        norm=None,
        enable_nested_tensor: bool = True,
        mask_check: bool = True,
    ) -> None:
        super().__init__()
        self.layers = _clones(encoder_layer, num_layers)
        self.num_layers, self.norm = num_layers, norm

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal=None):
        first = self.layers[0] if len(self.layers) else None
        batch_first = first is not None and first.self_attn.batch_first
        is_causal = _is_causal(mask, is_causal, _seq_len(src, batch_first))
        x = src
        for layer in self.layers:
            x = layer(x, src_mask=mask, src_key_padding_mask=src_key_padding_mask, is_causal=is_causal)
        return x if self.norm is None else self.norm(x)


class TransformerDecoder(Module):
    """num_layers copies of decoder_layer, then norm; forward(tgt, memory, tgt_mask=None,
    memory_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None,
    tgt_is_causal=None, memory_is_causal=False)."""

    def __init__(self, decoder_layer, num_layers: int, norm=None) -> None:
        super().__init__()
        self.layers = _clones(decoder_layer, num_layers)
        self.num_layers, self.norm = num_layers, norm

    def forward(
        self,
        tgt,
        memory,
        tgt_mask=None,
        memory_mask=None,
        tgt_key_padding_mask=None,
        memory_key_padding_mask=None,
        tgt_is_causal=None,
        memory_is_causal: bool = False,
    ):
        first = self.layers[0] if len(self.layers) else None
        batch_first = first is not None and first.self_attn.batch_first
        tgt_is_causal = _is_causal(tgt_mask, tgt_is_causal, _seq_len(tgt, batch_first))
        x = tgt
        for layer in self.layers:
            x = layer(
                x,
                memory,
                tgt_mask,
                memory_mask,
                tgt_key_padding_mask,
                memory_key_padding_mask,
                tgt_is_causal,
                memory_is_causal,
            )
        return x if self.norm is None else self.norm(x)


class Transformer(Module):
    """torch.nn.Transformer: an encoder and a decoder stack, each ending in a LayerNorm,
    every matrix xavier-uniform; forward(src, tgt, src_mask=None, tgt_mask=None,
    memory_mask=None, src_key_padding_mask=None, tgt_key_padding_mask=None,
    memory_key_padding_mask=None, src_is_causal=None, tgt_is_causal=None,
    memory_is_causal=False)."""

    def __init__(
        self,
        d_model: int = 512,
        nhead: int = 8,
        num_encoder_layers: int = 6,
        num_decoder_layers: int = 6,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation="relu",
        custom_encoder=None,
        custom_decoder=None,
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        args = (
            d_model,
            nhead,
            dim_feedforward,
            dropout,
            activation,
            layer_norm_eps,
            batch_first,
            norm_first,
            bias,
        )
        if custom_encoder is not None:
            self.encoder = custom_encoder
        else:
            norm = LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
            self.encoder = TransformerEncoder(TransformerEncoderLayer(*args), num_encoder_layers, norm)
        if custom_decoder is not None:
            self.decoder = custom_decoder
        else:
            norm = LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
            self.decoder = TransformerDecoder(TransformerDecoderLayer(*args), num_decoder_layers, norm)
        for p in self.parameters():
            if len(p.shape) > 1:
                init.xavier_uniform_(p)
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first

    generate_square_subsequent_mask = staticmethod(generate_square_subsequent_mask)

    def forward(
        self,
        src,
        tgt,
        src_mask=None,
        tgt_mask=None,
        memory_mask=None,
        src_key_padding_mask=None,
        tgt_key_padding_mask=None,
        memory_key_padding_mask=None,
        src_is_causal=None,
        tgt_is_causal=None,
        memory_is_causal: bool = False,
    ):
        memory = self.encoder(
            src, mask=src_mask, src_key_padding_mask=src_key_padding_mask, is_causal=src_is_causal
        )
        return self.decoder(
            tgt,
            memory,
            tgt_mask,
            memory_mask,
            tgt_key_padding_mask,
            memory_key_padding_mask,
            tgt_is_causal,
            memory_is_causal,
        )
