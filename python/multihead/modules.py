# SPDX-License-Identifier: Apache-2.0
"""multihead's models as plain PyTorch modules: what Run.to_torch() builds.

Each module holds a run's weights under the names multihead's checkpoints give them (PyTorch's
state_dict names), computes what multihead computes, and needs nothing but PyTorch. PyTorch's own
modules are used where PyTorch has them (nn.Embedding, nn.Linear, nn.LayerNorm, and
nn.TransformerEncoderLayer / nn.TransformerDecoderLayer where the attention is plain multi-head
attention with positions added to the input); the rest is plain PyTorch code here: rotary, ALiBi
and Shaw relative positions, sliding-window, block-sparse and linear attention, grouped-query heads
and the ViT patch embedding.

    SequenceClassifier(ids, padding=None)       -> logits (B, classes)
    LanguageModel(ids)                          -> logits (B, L, vocabulary), causal
    VisionTransformer(images)                   -> logits (B, classes), images (B, C, S, S)
    EncoderDecoder(source, source_padding, target) -> logits (B, T, target vocabulary)

ids are int64 token ids; padding masks are bool, True at padding (nn.MultiheadAttention's key
padding polarity). A query that can see no key attends to nothing (zeros), as multihead and
PyTorch 2.x's scaled_dot_product_attention do.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["Attention", "EncoderLayer", "DecoderLayer", "Encoder", "Decoder", "SequenceClassifier",
           "LanguageModel", "VisionTransformer", "EncoderDecoder", "alibi_slopes", "rotate", "sinusoidal_table"]


def alibi_slopes(num_heads):
    """Press et al. (2022): 2^(-8 (h + 1) / H) for H a power of two; otherwise those of the nearest
    lower power of two, then every other slope of the next one."""
    def powers(n):
        return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]
    p = 1
    while p * 2 <= num_heads:
        p *= 2
    slopes = powers(p)
    slopes += powers(2 * p)[0::2][:num_heads - p]
    return torch.tensor(slopes, dtype=torch.float32)


def rope_angles(theta, D, start, end):
    """RoPE's cos and sin at positions start .. end - 1, each (end - start, D/2) float32: pair i at
    position p turns by p * theta^(-2i / D)."""
    freq = torch.exp(torch.arange(D // 2, dtype=torch.float64) * (-2.0 * math.log(theta) / D))
    angle = torch.arange(start, end, dtype=torch.float64)[:, None] * freq[None, :]  # (L, D/2)
    # Reduced modulo 2 pi in float64, then float32: cos and sin as exact as in float64 (multihead's),
    # and ONNX Runtime, which has no float64 cos or sin, runs the exported graph.
    angle = torch.remainder(angle, 2 * math.pi).float()
    return torch.cos(angle), torch.sin(angle)


_rope_tables = {}


def rope_table(theta, D, positions):
    """rope_angles for positions 0 .. positions - 1, made once and shared by every layer: what an
    exported graph gathers by position instead of computing cos and sin at every step."""
    key = (theta, D, positions)
    if key not in _rope_tables:
        _rope_tables[key] = rope_angles(theta, D, 0, positions)
    return _rope_tables[key]


def rotate(x, theta, start=0, table=None):
    """RoPE on x (B, H, L, D) at positions start .. start + L - 1: the pair (x[2i], x[2i+1]) at
    position p turns by p * theta^(-2i / D). table: rope_table's (cos, sin) to read the positions
    from where it holds them (the same numbers); an exported graph always reads it, and fails on
    positions past it."""
    L, D = x.shape[-2], x.shape[-1]
    if table is not None and (_exporting() or start + L <= table[0].shape[0]):
        c, s = table[0][start:start + L], table[1][start:start + L]
    else:
        c, s = rope_angles(theta, D, start, start + L)
    c, s = c.to(x.dtype), s.to(x.dtype)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack([a * c - b * s, a * s + b * c], dim=-1).flatten(-2)


def sinusoidal_table(max_len, d_model):
    """PE(p, 2i) = sin(p / 10000^(2i/d)), PE(p, 2i+1) = cos(p / 10000^(2i/d)), (max_len, d_model)."""
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    i = torch.arange(0, d_model, 2, dtype=torch.float64)
    angle = pos / torch.pow(10000.0, i / d_model)
    table = torch.zeros(max_len, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle)[:, :d_model // 2]
    return table.float()


def _exporting():
    """Whether torch.onnx.export is tracing this call (then the attention takes the shape ONNX
    Runtime's optimizer fuses)."""
    return hasattr(torch, "onnx") and torch.onnx.is_in_onnx_export()


def _masked_softmax(scores, blocked):
    """softmax over the last dimension with the keys `blocked` (True) left out; a row with no key
    left is zeros, with zero gradients (the scores there are replaced before the softmax)."""
    scores = scores.masked_fill(blocked, float("-inf"))
    empty = blocked.all(dim=-1, keepdim=True)
    probs = torch.softmax(scores.masked_fill(empty, 0.0), dim=-1)
    return probs.masked_fill(empty, 0.0)


class Attention(nn.Module):
    """multihead's MultiheadAttention (batch first) with its parameters: in_proj_weight (E + 2 KE, E),
    in_proj_bias, out_proj, and relative_key / relative_value (2 clip + 1, head_dim) for Shaw
    relative positions. KE = num_kv_heads * head_dim (grouped-query attention: query head h reads
    key/value head h // (num_heads / num_kv_heads)).

    positions: "none", "rope", "alibi" or "relative"; attention: "full", "sliding_window",
    "block_sparse" or "linear" (phi(x) = elu(x) + 1, eps 1e-6). The sparse patterns place query i
    at key position i + S - L (bottom-right), as multihead and FlashAttention do.
    """

    def __init__(self, embed_dim, num_heads, dropout=0.0, positions="none", rope_theta=10000.0,
                 relative_clip=16, relative_values=True, attention="full", window_left=64, window_right=64,
                 sparse_block=64, sparse_neighbours=1, global_tokens=0, num_kv_heads=0, rope_positions=0):
        super().__init__()
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        self.kv_heads = num_kv_heads or num_heads
        self.dropout = dropout
        self.positions, self.rope_theta = positions, rope_theta
        self.attention = attention
        self.window = (window_left, window_right)
        self.sparse = (sparse_block, sparse_neighbours, global_tokens)
        kv = self.kv_heads * self.head_dim
        self.in_proj_weight = nn.Parameter(torch.empty(embed_dim + 2 * kv, embed_dim))
        self.in_proj_bias = nn.Parameter(torch.zeros(embed_dim + 2 * kv))
        self.out_proj = nn.Linear(embed_dim, embed_dim)
        nn.init.xavier_uniform_(self.in_proj_weight)
        self.relative_clip = relative_clip
        if positions == "relative":
            buckets = 2 * relative_clip + 1
            self.relative_key = nn.Parameter(torch.empty(buckets, self.head_dim))
            nn.init.xavier_uniform_(self.relative_key)
            if relative_values:
                self.relative_value = nn.Parameter(torch.empty(buckets, self.head_dim))
                nn.init.xavier_uniform_(self.relative_value)
            else:
                self.relative_value = None
        if positions == "alibi":
            self.register_buffer("alibi_slopes", alibi_slopes(num_heads), persistent=False)
        # RoPE's cos and sin for the model's positions (rope_positions > 0): read, not recomputed.
        if positions == "rope" and rope_positions > 0:
            cos, sin = rope_table(rope_theta, self.head_dim, rope_positions)
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)

    @property
    def _rope(self):
        return (self.rope_cos, self.rope_sin) if hasattr(self, "rope_cos") else None

    def _heads(self, x, start, heads):
        """Rows start : start + heads * head_dim of the projection of x, as (B, heads, L, head_dim)."""
        w = self.in_proj_weight[start:start + heads * self.head_dim]
        b = self.in_proj_bias[start:start + heads * self.head_dim]
        y = F.linear(x, w, b)
        return y.reshape(x.shape[0], x.shape[1], heads, self.head_dim).transpose(1, 2)

    def _blocked(self, L, S, key_padding_mask, causal, device):
        """(B or 1, 1, L, S) bool, True where query i may not see key j."""
        i = torch.arange(L, device=device)[:, None]
        j = torch.arange(S, device=device)[None, :]
        p = i + (S - L)  # the query's position among the keys
        blocked = torch.zeros(L, S, dtype=torch.bool, device=device)
        if causal:  # bottom-right: query i sits at key position p (top-left where L == S)
            blocked = blocked | (j > p)
        if self.attention == "sliding_window":
            left, right = self.window
            if left >= 0:
                blocked = blocked | (j < p - left)
            if right >= 0:
                blocked = blocked | (j > p + right)
        if self.attention == "block_sparse":
            block, neighbours, global_tokens = self.sparse
            qb = torch.where(p < 0, torch.full_like(p, -1), torch.div(p, block, rounding_mode="floor"))
            kb = torch.div(j, block, rounding_mode="floor")
            far = (kb < qb - neighbours) | (kb > qb + neighbours)
            blocked = blocked | (far & (j >= global_tokens) & (p >= global_tokens))
        blocked = blocked[None, None]
        if key_padding_mask is not None:
            blocked = blocked | key_padding_mask[:, None, None, :].bool()
        return blocked

    def _buckets(self, L, S, device):
        """(L, S, 2 clip + 1) one-hot of clamp(j - i, -clip, clip) + clip."""
        c = self.relative_clip
        rel = torch.arange(S, device=device)[None, :] - torch.arange(L, device=device)[:, None]
        idx = rel.clamp(-c, c) + c
        return (idx[..., None] == torch.arange(2 * c + 1, device=device)).to(self.in_proj_weight.dtype)

    def keys_values(self, x):
        """The keys and values of x (B, S, E), each (B, kv_heads, S, head_dim), before positions: what
        cross-attention to a memory computes once for every decoding step (cross)."""
        E, KE = self.embed_dim, self.kv_heads * self.head_dim
        return self._heads(x, E, self.kv_heads), self._heads(x, E + KE, self.kv_heads)

    def forward(self, x, memory=None, key_padding_mask=None, causal=False):
        """x (B, L, E) attends to itself, or to memory (B, S, E); key_padding_mask (B, S) bool, True
        at padding; causal: query i sees keys j <= i. Returns (B, L, E)."""
        q = self._heads(x, 0, self.num_heads)
        k, v = self.keys_values(x if memory is None else memory)
        if self.positions == "rope":
            q, k = rotate(q, self.rope_theta, 0, self._rope), rotate(k, self.rope_theta, 0, self._rope)
        return self._attend(q, k, v, key_padding_mask, causal)

    def cross(self, x, kv, key_padding_mask=None):
        """x (B, T, E) attends to a memory given as its keys_values(memory): forward(x, memory) with
        the memory's projections made once. Returns (B, T, E)."""
        return self._attend(self._heads(x, 0, self.num_heads), kv[0], kv[1], key_padding_mask, False)

    def step(self, x, past=None):
        """Causal self-attention of T new tokens x (B, T, E) after the S cached ones: past is None or
        (k, v), each (B, kv_heads, S, head_dim) with RoPE applied. Returns (out (B, T, E), (k, v) with
        the new tokens appended): the rows forward(..., causal=True) gives for those tokens. Full
        attention with positions "none", "rope" or "alibi"."""
        if self.attention != "full" or self.positions not in ("none", "rope", "alibi"):
            raise ValueError(f"step (a KV cache) takes full attention with no, rotary or ALiBi positions, not "
                             f"{self.attention} attention with {self.positions} positions")
        S = 0 if past is None else past[0].shape[2]
        q = self._heads(x, 0, self.num_heads)
        k, v = self.keys_values(x)
        if self.positions == "rope":
            q, k = rotate(q, self.rope_theta, S, self._rope), rotate(k, self.rope_theta, S, self._rope)
        if past is not None:
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        # The new tokens at positions S .. S + T - 1 among the keys (causal, bottom-right).
        return self._attend(q, k, v, None, True), (k, v)

    def _attend(self, q, k, v, key_padding_mask, causal):
        """Queries (B, H, L, head_dim) over keys and values (B, kv_heads, S, head_dim), through
        out_proj: (B, L, E)."""
        if self.kv_heads != self.num_heads:
            group = self.num_heads // self.kv_heads
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        if self.attention == "linear":
            out = self._linear(q, k, v, key_padding_mask, causal)
        else:
            out = self._softmax(q, k, v, key_padding_mask, causal)
        return self.out_proj(out.transpose(1, 2).reshape(q.shape[0], q.shape[2], self.embed_dim))

    def _softmax(self, q, k, v, key_padding_mask, causal):
        L, S = q.shape[2], k.shape[2]
        if _exporting() and self.attention == "full" and self.positions in ("none", "rope"):
            return self._softmax_for_onnx(q, k, v, key_padding_mask, causal)
        if (not torch.is_grad_enabled() and self.attention == "full" and self.positions in ("none", "rope")
                and hasattr(F, "scaled_dot_product_attention")):
            # Inference on PyTorch 2: its fused kernel (and, exported, one masked softmax). A query that
            # sees no key gets zeros there too (2.6: a row of padding alone gives 0, not NaN).
            dropout = self.dropout if self.training else 0.0
            if key_padding_mask is None and (not causal or L == 1 or L == S):
                # No mask to build: one query sees every key, and L == S is causal's own triangle.
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal and L > 1, dropout_p=dropout)
            blocked = self._blocked(L, S, key_padding_mask, causal, q.device)
            return F.scaled_dot_product_attention(q, k, v, attn_mask=~blocked, dropout_p=dropout)
        scale = 1.0 / math.sqrt(self.head_dim)
        scores = torch.matmul(q, k.transpose(-1, -2)) * scale  # (B, H, L, S)
        buckets = None
        if self.positions == "relative":
            buckets = self._buckets(L, S, q.device)
            qr = torch.matmul(q, self.relative_key.t())  # (B, H, L, 2 clip + 1)
            scores = scores + scale * torch.einsum("bhln,lsn->bhls", qr, buckets)
        if self.positions == "alibi":  # distances from the query's position among the keys
            i = torch.arange(L, device=q.device)[:, None] + (S - L)
            j = torch.arange(S, device=q.device)[None, :]
            distance = (i - j).abs().to(scores.dtype)
            scores = scores - self.alibi_slopes.to(scores.dtype)[:, None, None] * distance
        probs = _masked_softmax(scores, self._blocked(L, S, key_padding_mask, causal, q.device))
        probs = F.dropout(probs, self.dropout, self.training)
        out = torch.matmul(probs, v)
        if buckets is not None and self.relative_value is not None:
            out = out + torch.matmul(torch.einsum("bhls,lsn->bhln", probs, buckets), self.relative_value)
        return out

    def _softmax_for_onnx(self, q, k, v, key_padding_mask, causal):
        """Softmax attention as ONNX Runtime's transformer optimizer recognises it and fuses into
        one Attention (or MultiHeadAttention) node: MatMul, Div by sqrt(head_dim), Add of the
        additive mask BERT's exporters write ((1 - keep) * the float minimum, keep unsqueezed twice
        from (B, S)), Softmax, MatMul. A key blocked costs the float minimum rather than minus
        infinity, so a query with no key left averages every value instead of giving zeros."""
        L, S = q.shape[2], k.shape[2]
        lowest = torch.finfo(q.dtype).min
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        if key_padding_mask is not None:
            keep = (~key_padding_mask.bool()).unsqueeze(1).unsqueeze(2).to(q.dtype)
            scores = scores + (1.0 - keep) * lowest
        if causal:  # bottom-right: query i sits at key position i + S - L (none blocked for one query)
            i = torch.arange(L, device=q.device)[:, None] + (S - L)
            j = torch.arange(S, device=q.device)[None, :]
            scores = scores + (j > i).to(q.dtype) * lowest
        return torch.matmul(torch.softmax(scores, dim=-1), v)

    def _linear(self, q, k, v, key_padding_mask, causal):
        """Katharopoulos et al. (2020): out_i = phi(q_i) S_i / (phi(q_i) . z_i + eps)."""
        qf, kf = F.elu(q) + 1, F.elu(k) + 1
        if key_padding_mask is not None:
            keep = (~key_padding_mask.bool())[:, None, :, None].to(kf.dtype)
            kf, v = kf * keep, v * keep
        if causal:  # bottom-right: query i sees keys j <= i + S - L
            L, S = q.shape[2], k.shape[2]
            i = torch.arange(L, device=q.device)[:, None]
            j = torch.arange(S, device=q.device)[None, :]
            a = torch.matmul(qf, kf.transpose(-1, -2)) * (j <= i + (S - L)).to(qf.dtype)
            return torch.matmul(a, v) / (a.sum(-1, keepdim=True) + 1e-6)
        state = torch.matmul(kf.transpose(-1, -2), v)  # (B, H, D, Dv)
        z = kf.sum(dim=2)  # (B, H, D)
        return torch.matmul(qf, state) / (torch.matmul(qf, z[..., None]) + 1e-6)


def _plain(attention):
    """Whether PyTorch's own layers compute this attention: multi-head, full, positions outside it."""
    return (attention.get("positions", "none") == "none" and attention.get("attention", "full") == "full"
            and attention.get("num_kv_heads", 0) in (0, attention["num_heads"]))


class EncoderLayer(nn.Module):
    """nn.TransformerEncoderLayer's computation and state_dict names (batch first) around an
    Attention of any of multihead's kinds."""

    def __init__(self, d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps, norm_first,
                 attention):
        super().__init__()
        self.self_attn = Attention(d_model, nhead, dropout=dropout, **attention)
        self.linear1 = nn.Linear(d_model, dim_feedforward)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(dim_feedforward, d_model)
        self.norm_first = norm_first
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.activation = _activation(activation)

    def _ff(self, x):
        return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def forward(self, x, padding=None, causal=False):
        # The attention's output is the residual sum's first term (the same sum): ONNX Runtime's
        # optimizer looks for the attention there first and would take an Add before x (the
        # positions added to the embeddings) for it.
        if self.norm_first:
            x = self.dropout1(self.self_attn(self.norm1(x), key_padding_mask=padding, causal=causal)) + x
            return x + self._ff(self.norm2(x))
        x = self.norm1(self.dropout1(self.self_attn(x, key_padding_mask=padding, causal=causal)) + x)
        return self.norm2(x + self._ff(x))


class DecoderLayer(EncoderLayer):
    """nn.TransformerDecoderLayer's computation and state_dict names (batch first): causal
    self-attention of any of multihead's kinds, then cross-attention to the memory (full, without
    positions, grouped-query heads kept)."""

    def __init__(self, d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps, norm_first,
                 attention):
        super().__init__(d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps, norm_first, attention)
        self.multihead_attn = Attention(d_model, nhead, dropout=dropout,
                                        num_kv_heads=attention.get("num_kv_heads", 0))
        self.norm3 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.dropout3 = nn.Dropout(dropout)

    def _ff(self, x):
        return self.dropout3(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def forward(self, x, memory, memory_padding=None):
        if self.norm_first:
            x = x + self.dropout1(self.self_attn(self.norm1(x), causal=True))
            x = x + self.dropout2(self.multihead_attn(self.norm2(x), memory, key_padding_mask=memory_padding))
            return x + self._ff(self.norm3(x))
        x = self.norm1(x + self.dropout1(self.self_attn(x, causal=True)))
        x = self.norm2(x + self.dropout2(self.multihead_attn(x, memory, key_padding_mask=memory_padding)))
        return self.norm3(x + self._ff(x))


def gelu_tanh(x):
    """GELU in its tanh form (GPT-2's gelu_new): the activation "gelu_tanh"."""
    return F.gelu(x, approximate="tanh")


def _activation(name):
    """A layer's activation by its config name: PyTorch's layers take relu and gelu by name, and
    this one as the function."""
    return {"relu": F.relu, "gelu": F.gelu, "gelu_tanh": gelu_tanh}[name]


def _causal_mask(L, device):
    """nn.MultiheadAttention's polarity: True where query i may not see key j (j > i)."""
    return torch.triu(torch.ones(L, L, dtype=torch.bool, device=device), diagonal=1)


def _stack(layer, num_layers, final_norm, pytorch_layer, own_layer):
    """num_layers layers (PyTorch's class where it computes the attention, else ours) and the final
    norm or None."""
    args = {k: layer[k] for k in ("d_model", "nhead", "dim_feedforward", "dropout", "activation", "layer_norm_eps",
                                  "norm_first")}
    if layer.get("pytorch_layers", True) and _plain(dict(layer["attention"], num_heads=layer["nhead"])):
        if args["activation"] not in ("relu", "gelu"):
            args["activation"] = _activation(args["activation"])
        layers = [pytorch_layer(batch_first=True, **args) for _ in range(num_layers)]
    else:
        layers = [own_layer(attention=layer["attention"], **args) for _ in range(num_layers)]
    norm = nn.LayerNorm(layer["d_model"], eps=layer["layer_norm_eps"]) if final_norm else None
    return nn.ModuleList(layers), norm


class Encoder(nn.Module):
    """A stack of encoder layers ("layers.{i}.") and an optional final LayerNorm ("norm."), as
    nn.TransformerEncoder names them."""

    def __init__(self, layer, num_layers, final_norm):
        super().__init__()
        self.layers, self.norm = _stack(layer, num_layers, final_norm, nn.TransformerEncoderLayer, EncoderLayer)

    def forward(self, x, padding=None, causal=False):
        mask = _causal_mask(x.shape[1], x.device) if causal else None
        for layer in self.layers:
            if isinstance(layer, EncoderLayer):
                x = layer(x, padding, causal)
            else:
                x = layer(x, src_mask=mask, src_key_padding_mask=padding)
        return self.norm(x) if self.norm is not None else x


class Decoder(nn.Module):
    """Decoder layers ("layers.{i}.") over a shared memory and an optional final LayerNorm ("norm.")."""

    def __init__(self, layer, num_layers, final_norm):
        super().__init__()
        self.layers, self.norm = _stack(layer, num_layers, final_norm, nn.TransformerDecoderLayer, DecoderLayer)

    def forward(self, x, memory, memory_padding=None):
        mask = _causal_mask(x.shape[1], x.device)
        for layer in self.layers:
            if isinstance(layer, DecoderLayer):
                x = layer(x, memory, memory_padding)
            else:
                x = layer(x, memory, tgt_mask=mask, memory_key_padding_mask=memory_padding)
        return self.norm(x) if self.norm is not None else x


def layer_settings(model, pytorch_layers=True):
    """The layer settings of a job config's "model" section, with multihead's defaults.
    pytorch_layers=False: our EncoderLayer / DecoderLayer even where PyTorch's would compute the same
    (the same state_dict); torch.onnx.export traces those into a graph that takes any batch and
    length, where nn.MultiheadAttention's traced graph keeps the length it was traced with."""
    d_model = model.get("d_model", 128)
    positions = model.get("positions", "sinusoidal")
    attention = {"positions": positions if positions in ("rope", "alibi", "relative") else "none",
                 "rope_theta": model.get("rope_theta", 10000.0), "relative_clip": model.get("relative_clip", 16),
                 "relative_values": model.get("relative_values", True),
                 "rope_positions": model.get("max_len", 512) if positions == "rope" else 0}
    for key, default in (("attention", "full"), ("window_left", 64), ("window_right", 64), ("sparse_block", 64),
                         ("sparse_neighbours", 1), ("global_tokens", 0), ("num_kv_heads", 0)):
        attention[key] = model.get(key, default)
    return {"d_model": d_model, "nhead": model.get("nhead", 4),
            "dim_feedforward": model.get("dim_feedforward", 4 * d_model), "dropout": model.get("dropout", 0.1),
            "activation": model.get("activation", "relu"), "layer_norm_eps": model.get("layer_norm_eps", 1e-5),
            "norm_first": model.get("norm_first", False), "attention": attention, "pytorch_layers": pytorch_layers}


class _Sinusoidal(nn.Module):
    """The sinusoidal table (a buffer, not in the state_dict), added to embeddings (B, L, d)."""

    def __init__(self, max_len, d_model):
        super().__init__()
        self.register_buffer("table", sinusoidal_table(max_len, d_model), persistent=False)

    def forward(self, x, start=0):
        return x + self.table[start:start + x.shape[1]]


def _absolute_positions(kind, max_len, d_model):
    """What adds absolute positions to embeddings: a learned table (an nn.Embedding, whose weight is
    the checkpoint's), the sinusoidal one, or None where positions act inside attention."""
    if kind == "learned":
        return nn.Embedding(max_len, d_model)
    return _Sinusoidal(max_len, d_model) if kind == "sinusoidal" else None


def _add_positions(positions, x, start=0):
    """x (B, L, d) at positions start .. start + L - 1, with absolute positions added (if any)."""
    if isinstance(positions, nn.Embedding):
        return x + positions.weight[start:start + x.shape[1]]
    return positions(x, start) if positions is not None else x


def _stepping_attention(attn):
    """What steps an attention over a KV cache (Attention.step) or a memory's keys and values
    (Attention.cross): our own Attention, or one holding the very parameters of PyTorch's
    nn.MultiheadAttention (kept out of the module tree)."""
    if isinstance(attn, Attention):
        return attn
    step = Attention(attn.embed_dim, attn.num_heads)
    step.in_proj_weight, step.in_proj_bias, step.out_proj = attn.in_proj_weight, attn.in_proj_bias, attn.out_proj
    return step


def _ff(layer, x):
    """An encoder or decoder layer's feed-forward block (ours or PyTorch's: the same names), eval mode."""
    return layer.linear2(layer.activation(layer.linear1(x)))


def _layer_step(layer, attn, x, past):
    """An encoder layer (ours or nn.TransformerEncoderLayer) over new tokens x (B, T, d) after the
    cached ones, causal, in eval mode: (output, the layer's cache with x's keys and values)."""
    if layer.norm_first:
        a, past = attn.step(layer.norm1(x), past)
        x = x + a
        return x + _ff(layer, layer.norm2(x)), past
    a, past = attn.step(x, past)
    x = layer.norm1(x + a)
    return layer.norm2(x + _ff(layer, x)), past


def _decoder_layer_step(layer, attn, cross, x, past, memory, memory_padding):
    """A decoder layer (ours or nn.TransformerDecoderLayer) over new tokens x (B, T, d) after the
    cached ones, in eval mode, cross-attending to memory (its keys and values): (output, the layer's
    self-attention cache with x's keys and values)."""
    if layer.norm_first:
        a, past = attn.step(layer.norm1(x), past)
        x = x + a
        x = x + cross.cross(layer.norm2(x), memory, memory_padding)
        return x + _ff(layer, layer.norm3(x)), past
    a, past = attn.step(x, past)
    x = layer.norm1(x + a)
    x = layer.norm2(x + cross.cross(x, memory, memory_padding))
    return layer.norm3(x + _ff(layer, x)), past


class SequenceClassifier(nn.Module):
    """embedding -> positions -> encoder -> mean over the unpadded tokens (or the first, [CLS])
    -> classifier. forward(ids (B, L), padding (B, L) bool or None) -> logits (B, classes)."""

    def __init__(self, model, vocab_size, num_classes, pytorch_layers=True):
        super().__init__()
        layer = layer_settings(model, pytorch_layers)
        d = layer["d_model"]
        self.pooling = model.get("pooling", "mean")
        self.embedding = nn.Embedding(vocab_size, d)
        self.pos_embedding = _absolute_positions(model.get("positions", "sinusoidal"), model.get("max_len", 512), d)
        self.encoder = Encoder(layer, model.get("num_layers", 2), model.get("final_norm", True))
        # A pretrained encoder's input (BERT's family): token type 0's row added, positions counted
        # from an offset (RoBERTa's 2), a LayerNorm and dropout over the sum.
        self.position_offset = model.get("position_offset", 0)
        if model.get("token_types", 0) > 0:
            self.token_type_embedding = nn.Embedding(model["token_types"], d)
        if model.get("embedding_norm", False):
            self.embedding_norm = nn.LayerNorm(d, eps=layer["layer_norm_eps"])
            self.embedding_dropout = nn.Dropout(layer["dropout"])
        # "tanh", "relu", "gelu" or "gelu_tanh": a d x d layer with that activation before the
        # classifier (BERT's pooler, DistilBERT's pre-classifier, ELECTRA's classification head).
        self.head = model.get("head", "linear")
        if self.head != "linear":
            self.pre_classifier = nn.Linear(d, d)
        self.classifier = nn.Linear(d, num_classes)

    def forward(self, ids, padding=None):
        x = _add_positions(self.pos_embedding, self.embedding(ids), self.position_offset)
        if hasattr(self, "token_type_embedding"):
            x = x + self.token_type_embedding.weight[0]
        if hasattr(self, "embedding_norm"):
            x = self.embedding_dropout(self.embedding_norm(x))
        h = self.encoder(x, padding)
        if self.pooling == "cls":
            pooled = h[:, 0]
        else:
            keep = torch.ones_like(ids, dtype=h.dtype) if padding is None else (~padding.bool()).to(h.dtype)
            pooled = (h * keep[..., None]).sum(1) / keep.sum(1, keepdim=True).clamp(min=1)
        if self.head != "linear":
            pooled = self.pre_classifier(pooled)
            pooled = torch.tanh(pooled) if self.head == "tanh" else _activation(self.head)(pooled)
        return self.classifier(pooled)


class LanguageModel(nn.Module):
    """embedding -> positions -> causal encoder -> lm_head (or the embedding matrix, tied).
    forward(ids (B, L)) -> logits (B, L, vocabulary)."""

    def __init__(self, model, vocab_size, pytorch_layers=True):
        super().__init__()
        layer = layer_settings(model, pytorch_layers)
        d = layer["d_model"]
        self.embedding = nn.Embedding(vocab_size, d)
        self.pos_embedding = _absolute_positions(model.get("positions", "sinusoidal"), model.get("max_len", 512), d)
        self.encoder = Encoder(layer, model.get("num_layers", 2), model.get("final_norm", True))
        self.lm_head = None if model.get("tie_embeddings", False) else nn.Linear(d, vocab_size, bias=False)

    def forward(self, ids):
        h = self.encoder(_add_positions(self.pos_embedding, self.embedding(ids)), causal=True)
        return self._logits(h)

    def _logits(self, h):
        return self.lm_head(h) if self.lm_head is not None else F.linear(h, self.embedding.weight)

    def forward_cached(self, ids, cache=None):
        """Incremental decoding in eval mode (no dropout): the logits (B, T, vocabulary) of T new
        tokens ids (B, T) after the cached ones, and the cache with them: a list of (keys, values)
        per layer, each (B, kv_heads, length, head_dim); None to start. The rows forward() gives for
        those tokens over the whole sequence. Full attention with absolute, rotary or ALiBi positions."""
        if getattr(self, "_steppers", None) is None:
            self._steppers = [_stepping_attention(layer.self_attn) for layer in self.encoder.layers]
        start = 0 if cache is None else cache[0][0].shape[2]
        x = _add_positions(self.pos_embedding, self.embedding(ids), start)
        new = []
        for i, (layer, attn) in enumerate(zip(self.encoder.layers, self._steppers)):
            x, kv = _layer_step(layer, attn, x, None if cache is None else cache[i])
            new.append(kv)
        if self.encoder.norm is not None:
            x = self.encoder.norm(x)
        return self._logits(x), new

    def generate(self, ids, tokens):
        """The greedy continuation of prompts ids (B, P) by `tokens` tokens, with a KV cache:
        (B, P + tokens) ids. Unlike Run.generate, it does not restart past the training window."""
        out = [ids]
        logits, cache = self.forward_cached(ids)
        for t in range(tokens):
            nxt = logits[:, -1].argmax(-1, keepdim=True)
            out.append(nxt)
            if t + 1 < tokens:
                logits, cache = self.forward_cached(nxt, cache)
        return torch.cat(out, dim=1)


class VisionTransformer(nn.Module):
    """A ViT for square images: patch x patch squares (channel-major pixel rows) through
    patch_embedding, cls_token first, learned pos_embedding (1, 1 + patches, d), the encoder (with
    its final norm), the [CLS] output through classifier. forward(images (B, C, S, S)) -> logits."""

    def __init__(self, model, pytorch_layers=True):
        super().__init__()
        self.image_size, self.patch = model.get("image_size", 28), model.get("patch", 4)
        self.channels = model.get("channels", 1)
        layer = layer_settings(dict(model, positions="none"), pytorch_layers)
        d = layer["d_model"]
        patches = (self.image_size // self.patch) ** 2
        self.patch_embedding = nn.Linear(self.channels * self.patch * self.patch, d)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d))
        self.pos_embedding = nn.Parameter(torch.zeros(1, patches + 1, d))
        self.encoder = Encoder(layer, model.get("num_layers", 4), True)
        self.classifier = nn.Linear(d, model.get("num_classes", 10))

    def forward(self, images):
        B, C, P = images.shape[0], self.channels, self.patch
        G = self.image_size // P
        x = images.reshape(B, C, G, P, G, P).permute(0, 2, 4, 1, 3, 5).reshape(B, G * G, C * P * P)
        x = torch.cat([self.cls_token.expand(B, -1, -1), self.patch_embedding(x)], dim=1) + self.pos_embedding
        return self.classifier(self.encoder(x)[:, 0])


class EncoderDecoder(nn.Module):
    """source ids -> source_embedding -> positions -> encoder -> memory; target ids ->
    target_embedding -> positions -> decoder (causal, cross-attention to the memory) -> output.
    forward(source (B, S), source_padding (B, S) bool or None, target (B, T)) -> logits (B, T, V)."""

    def __init__(self, model, source_vocab, target_vocab, decoder_layers=0, pytorch_layers=True):
        super().__init__()
        layer = layer_settings(model, pytorch_layers)
        d, kind, max_len = layer["d_model"], model.get("positions", "sinusoidal"), model.get("max_len", 512)
        num_layers = model.get("num_layers", 2)
        final_norm = model.get("final_norm", True)
        self.source_embedding = nn.Embedding(source_vocab, d)
        self.target_embedding = nn.Embedding(target_vocab, d)
        self.source_positions = _absolute_positions(kind, max_len, d)
        self.target_positions = _absolute_positions(kind, max_len, d)
        self.encoder = Encoder(layer, num_layers, final_norm)
        self.decoder = Decoder(layer, decoder_layers or num_layers, final_norm)
        self.output = nn.Linear(d, target_vocab)

    def forward(self, source, source_padding, target):
        memory = self.encoder(_add_positions(self.source_positions, self.source_embedding(source)), source_padding)
        h = self.decoder(_add_positions(self.target_positions, self.target_embedding(target)), memory, source_padding)
        return self.output(h)

    def _steppers(self):
        """Each decoder layer's self- and cross-attention as Attention (what decode_cached steps)."""
        if getattr(self, "_decoding", None) is None:
            self._decoding = ([_stepping_attention(layer.self_attn) for layer in self.decoder.layers],
                              [_stepping_attention(layer.multihead_attn) for layer in self.decoder.layers])
        return self._decoding

    def encode(self, source, source_padding=None):
        """The memory of source (B, S) as each decoder layer's cross-attention reads it: a list of
        (keys, values) per decoder layer, each (B, kv_heads, S, head_dim), made once for every step."""
        memory = self.encoder(_add_positions(self.source_positions, self.source_embedding(source)), source_padding)
        return [cross.keys_values(memory) for cross in self._steppers()[1]]

    def decode_cached(self, target, memory, source_padding=None, cache=None):
        """Incremental decoding in eval mode: the logits (B, T, V) of T new target tokens (B, T)
        after the cached ones, over encode()'s memory, and the cache with them (a list of (keys,
        values) per decoder layer; None to start). The rows forward() gives for those tokens. Full
        self-attention with absolute, rotary or ALiBi positions."""
        attns, crosses = self._steppers()
        start = 0 if cache is None else cache[0][0].shape[2]
        x = _add_positions(self.target_positions, self.target_embedding(target), start)
        new = []
        for i, layer in enumerate(self.decoder.layers):
            x, kv = _decoder_layer_step(layer, attns[i], crosses[i], x, None if cache is None else cache[i],
                                        memory[i], source_padding)
            new.append(kv)
        if self.decoder.norm is not None:
            x = self.decoder.norm(x)
        return self.output(x), new

    def generate(self, source, source_padding=None, start=1, end=2, max_len=32):
        """Greedy decoding with a KV cache, as multihead's pronounce with beam 1: (B, T) tokens after
        the start token, T <= max_len (the end token counted), until every row has produced `end`;
        a row's tokens after its end are `end`. The defaults are a pronunciation run's ids."""
        memory = self.encode(source, source_padding)
        nxt = torch.full((source.shape[0], 1), start, dtype=torch.long, device=source.device)
        done = torch.zeros(source.shape[0], 1, dtype=torch.bool, device=source.device)
        out, cache = [], None
        for _ in range(max_len):
            logits, cache = self.decode_cached(nxt, memory, source_padding, cache)
            nxt = torch.where(done, end, logits[:, -1].argmax(-1, keepdim=True))
            out.append(nxt)
            done = done | (nxt == end)
            if bool(done.all()):
                break
        return torch.cat(out, dim=1)
