# SPDX-License-Identifier: Apache-2.0
"""Decoding steps as ONNX Runtime's own decoding path runs them: graphs written op by op from a
module's weights, each layer's self-attention one GroupQueryAttention node (ONNX Runtime's contrib
op: RoPE from a cos/sin table by position, the KV cache appended in place of Concat, causal
masking, grouped key/value heads) and each cross-attention one MultiHeadAttention node over the
memory's keys and values, instead of the dozens of nodes a traced export gives and no optimizer of
ONNX Runtime fuses back (its GPT-2 fusion wants GPT-2's own export, its rotary fusion LLaMA's
rotate-half pattern, where multihead turns interleaved pairs).

An encoder-decoder's encoder is written so too: each self-attention one MultiHeadAttention over
the whole source (RoPE turned by RotaryEmbedding), its output the memory's keys and values for
each decoder layer, as the traced encoder gives them: (source, padding) -> memory_key_i,
memory_value_i.

The graphs keep the traced steps' interfaces (multihead.onnx_export): a language model's (ids
(B, T), past_key_i, past_value_i ...) -> (logits (B, T, vocabulary), present_key_i,
present_value_i ...), an encoder-decoder's (ids, padding, memory_key_i, memory_value_i ...,
past_key_i, past_value_i ...) -> (logits, present_*), each cache (B, kv_heads, length, head_dim)
with RoPE applied, as multihead.modules holds it. Every row of a batch has the same length
(GroupQueryAttention's positions come from the cache's length), and ONNX Runtime takes several new
tokens after a cache only at batch 1.

Needs the onnx package and PyTorch (the module's weights), not ONNX Runtime.
"""
import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

from . import modules

OPSET = 17


def _fits(attn):
    """Self-attention GroupQueryAttention computes: full, RoPE (its table made) or no positions
    inside, heads as its CPU kernel takes them (a multiple of 8 wide, of 16 with RoPE)."""
    rope = attn.positions == "rope"
    return (attn.attention == "full" and attn.positions in ("none", "rope") and (attn._rope or not rope)
            and attn.head_dim % (16 if rope else 8) == 0)


def _absolute(positions):
    """Absolute positions this module adds: learned, sinusoidal or none."""
    return positions is None or hasattr(positions, "table") or isinstance(positions, torch.nn.Embedding)


_ACTIVATIONS = (torch.nn.functional.relu, torch.nn.functional.gelu, modules.gelu_tanh)


def supports(lm):
    """Whether this module writes lm's decoding step (a multihead.modules.LanguageModel of our own
    layers): every layer's self-attention _fits, absolute positions outside, ReLU or either GELU;
    else the traced export serves it."""
    return _absolute(lm.pos_embedding) and all(
        isinstance(layer, modules.EncoderLayer) and _fits(layer.self_attn) and layer.activation in _ACTIVATIONS
        for layer in lm.encoder.layers)


def supports_decoder(s2s):
    """The same for an EncoderDecoder's decoding step: also cross-attention with as many key/value
    heads as query heads (MultiHeadAttention's)."""
    return _absolute(s2s.target_positions) and all(
        isinstance(layer, modules.DecoderLayer) and _fits(layer.self_attn) and layer.activation in _ACTIVATIONS
        and layer.multihead_attn.kv_heads == layer.multihead_attn.num_heads for layer in s2s.decoder.layers)


def supports_encoder(s2s):
    """Whether this module writes an EncoderDecoder's encoder: each encoder layer's self-attention
    full with RoPE (its table made) or no positions inside, as many key/value heads as query heads
    (MultiHeadAttention's), absolute positions outside, ReLU or either GELU."""
    return _absolute(s2s.source_positions) and all(
        isinstance(layer, modules.EncoderLayer) and layer.activation in _ACTIVATIONS
        and layer.self_attn.attention == "full" and layer.self_attn.positions in ("none", "rope")
        and (layer.self_attn._rope or layer.self_attn.positions != "rope")
        and layer.self_attn.kv_heads == layer.self_attn.num_heads for layer in s2s.encoder.layers)


class _Graph:
    """Nodes and initializers gathered as the step is written."""

    def __init__(self):
        self.nodes, self.weights, self.count, self.lengths, self.constants = [], [], 0, None, set()

    def weight(self, name, array):
        self.weights.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def tensor(self, t, name):
        return self.weight(name, t.detach().float().cpu().numpy())

    def shared(self, t, name):
        """A tensor every layer reads (the RoPE table), added once by its name."""
        if name not in self.constants:
            self.constants.add(self.tensor(t, name))
        return name

    def const(self, name, values, dtype=np.int64):
        """A small constant, made once by its name."""
        if name not in self.constants:
            self.constants.add(self.weight(name, np.array(values, dtype=dtype)))
        return name

    def op(self, op_type, inputs, outputs=1, domain=None, **attrs):
        """One node; returns its output name (or names, for several)."""
        self.count += 1
        names = [f"{op_type.lower()}_{self.count}" + (f"_{i}" if outputs > 1 else "") for i in range(outputs)]
        self.nodes.append(helper.make_node(op_type, inputs, names, name=f"{op_type}_{self.count}",
                                           domain=domain, **attrs))
        return names if outputs > 1 else names[0]

    def matmul(self, x, weight, name):
        """x @ weight^T (weight (out, in), as nn.Linear holds it)."""
        return self.op("MatMul", [x, self.tensor(weight.t(), f"{name}.weight_t")])

    def linear(self, x, weight, bias, name):
        """x @ weight^T + bias."""
        return self.op("Add", [self.matmul(x, weight, name), self.tensor(bias, f"{name}.bias")])

    def norm(self, x, ln, name):
        return self.op("LayerNormalization", [x, self.tensor(ln.weight, f"{name}.weight"),
                                              self.tensor(ln.bias, f"{name}.bias")], axis=-1, epsilon=ln.eps)


def _projection(g, x, linear, name):
    """x @ W^T of an nn.Linear, its bias left for the residual sum's SkipLayerNormalization:
    (product, bias)."""
    return g.matmul(x, linear.weight, name), g.tensor(linear.bias, f"{name}.bias")


def _self_attention(g, x, attn, past, seq, presents, name):
    """One GroupQueryAttention over x (B, T, E) and the layer's cache (its present appended to
    presents), through out_proj."""
    qkv = g.linear(x, attn.in_proj_weight, attn.in_proj_bias, f"{name}.in_proj")
    rope = attn.positions == "rope"
    inputs = [qkv, "", "", past[0], past[1], seq["seqlens_k"], seq["total"]]
    if rope:
        inputs += [seq["cos"], seq["sin"]]
    out, key, value = g.op("GroupQueryAttention", inputs, outputs=3, domain="com.microsoft",
                           num_heads=attn.num_heads, kv_num_heads=attn.kv_heads,
                           scale=1.0 / float(np.sqrt(attn.head_dim)), do_rotary=int(rope),
                           rotary_interleaved=int(rope))
    presents += [key, value]
    return _projection(g, out, attn.out_proj, f"{name}.out_proj")


def _cross_attention(g, x, attn, memory, keep, name):
    """x (B, T, E) attends to the memory's keys and values (B, heads, S, head_dim): its query
    projection, one MultiHeadAttention (keep: (B, S) int32, 1 at a letter), out_proj."""
    E = attn.embed_dim
    q = g.linear(x, attn.in_proj_weight[:E], attn.in_proj_bias[:E], f"{name}.q_proj")
    out = g.op("MultiHeadAttention", [q, memory[0], memory[1], "", keep], domain="com.microsoft",
               num_heads=attn.num_heads, scale=1.0 / float(np.sqrt(attn.head_dim)))
    return _projection(g, out, attn.out_proj, f"{name}.out_proj")


def _feed_forward(g, x, layer, name):
    h = g.linear(x, layer.linear1.weight, layer.linear1.bias, f"{name}.linear1")
    if layer.activation is torch.nn.functional.relu:
        h = g.op("Relu", [h])
    else:  # ONNX Runtime's contrib GELUs (erf form; the tanh form FastGelu), in vectors on its CPU
        h = g.op("Gelu" if layer.activation is torch.nn.functional.gelu else "FastGelu", [h], domain="com.microsoft")
    return _projection(g, h, layer.linear2, f"{name}.linear2")


def _sublayers(g, layers, attend, memories):
    """Each layer's parts in order, as (the norm paired with it, a function of its input giving
    (product, bias)): self-attention with norm1 (attend(h, i, layer, name)), cross-attention with
    norm2 (a decoder layer), the feed-forward block with the last norm."""
    parts = []
    for i, layer in enumerate(layers):
        name = f"layers.{i}"
        parts.append((layer.norm1, lambda h, i=i, layer=layer, name=name: attend(h, i, layer, name)))
        if memories is not None:
            parts.append((layer.norm2, lambda h, layer=layer, name=name, memory=memories[i]:
                          _cross_attention(g, h, layer.multihead_attn, *memory, f"{name}.cross")))
        parts.append((layer.norm3 if memories is not None else layer.norm2,
                      lambda h, layer=layer, name=name: _feed_forward(g, h, layer, name)))
    return parts


def _skip_norm(g, delta, bias, x, ln, name):
    """LayerNorm(x + delta + bias) and the sum itself, one SkipLayerNormalization."""
    out, _, _, total = g.op("SkipLayerNormalization", [delta, x, g.tensor(ln.weight, f"{name}.weight"),
                                                       g.tensor(ln.bias, f"{name}.bias"), bias],
                            outputs=4, domain="com.microsoft", epsilon=ln.eps)
    return out, total


def _stack(g, x, parts, norm_first, norm):
    """The sublayers' parts over x, then the final norm (if any), eval mode. Each residual sum and
    the LayerNorm after it are one SkipLayerNormalization with the sublayer's bias folded in, as
    ONNX Runtime's own model builder writes them: pre-norm, the norm before the next sublayer (or
    the final one); post-norm, the sublayer's own."""
    if not norm_first:
        for i, (ln, part) in enumerate(parts):
            x, _ = _skip_norm(g, *part(x), x, ln, f"sublayer.{i}.norm")
        return x if norm is None else g.norm(x, norm, "norm")
    h, pending = g.norm(x, parts[0][0], "sublayer.0.norm"), None
    for i, (ln, part) in enumerate(parts):
        if pending is not None:
            h, x = _skip_norm(g, *pending, x, ln, f"sublayer.{i}.norm")
        pending = part(h)
    if norm is not None:
        return _skip_norm(g, *pending, x, norm, "norm")[0]
    return g.op("Add", [g.op("Add", list(pending)), x])


def _decode(g, x, layers, norm, memories=None):
    """The stack of layers over the new tokens x (_stack), each self-attention a GroupQueryAttention
    over the layer's cache; and the layers' present caches in order."""
    presents, seq = [], _sequence(g, layers[0].self_attn)

    def attend(h, i, layer, name):
        return _self_attention(g, h, layer.self_attn, (f"past_key_{i}", f"past_value_{i}"), seq, presents, name)

    return _stack(g, x, _sublayers(g, layers, attend, memories), layers[0].norm_first, norm), presents


def _lengths(g):
    """The cache's length S (past_key_0's third axis) and S + T, each (1,) int64, made once."""
    if g.lengths is None:
        cached = g.op("Shape", ["past_key_0"], start=2, end=3)
        g.lengths = cached, g.op("Add", [cached, g.op("Shape", ["ids"], start=1, end=2)])
    return g.lengths


def _sequence(g, attn):
    """What every layer's GroupQueryAttention reads of the step: the total length S + T (an int32
    scalar), seqlens_k (each row's total minus one, int32) and the RoPE table (attn's: every
    layer's is the same modules.rope_table)."""
    total32 = g.op("Cast", [_lengths(g)[1]], to=TensorProto.INT32)
    last = g.op("Sub", [total32, g.const("one_i32", [1], np.int32)])
    seq = {"seqlens_k": g.op("Expand", [last, g.op("Shape", ["ids"], start=0, end=1)]),
           "total": g.op("Squeeze", [total32, g.const("axis_0", [0])])}
    if attn.positions == "rope":
        seq["cos"], seq["sin"] = g.tensor(attn.rope_cos, "rope_cos"), g.tensor(attn.rope_sin, "rope_sin")
    return seq


def _embed(g, embedding, positions, ids="ids", span=None, prefix=""):
    """The embeddings of ids, with absolute positions span() = (start, end) added (if any; by
    default the new tokens' S .. S + T - 1 after the cache)."""
    x = g.op("Gather", [g.tensor(embedding.weight, f"{prefix}embedding.weight"), ids])
    if positions is None:
        return x
    table = positions.weight if isinstance(positions, torch.nn.Embedding) else positions.table
    start, end = span() if span else _lengths(g)
    return g.op("Add", [x, g.op("Slice", [g.tensor(table, f"{prefix}positions.table"), start, end,
                                          g.const("axis_0", [0])])])


def _encoder_attention(g, x, attn, keep, name):
    """Self-attention over the whole source x (B, S, E): the packed projection split into Q, K and
    V, RoPE turned by RotaryEmbedding (interleaved pairs, positions from 0) where the layer has it,
    one MultiHeadAttention (keep: (B, S) int32, 1 at a letter), through out_proj."""
    E = attn.embed_dim
    qkv = g.linear(x, attn.in_proj_weight, attn.in_proj_bias, f"{name}.in_proj")
    q, k, v = g.op("Split", [qkv, g.const(f"split_{E}", [E, E, E])], outputs=3, axis=-1)
    if attn.positions == "rope":
        cos, sin = g.shared(attn.rope_cos, "rope_cos"), g.shared(attn.rope_sin, "rope_sin")
        start = g.const("position_0", [0])
        q, k = (g.op("RotaryEmbedding", [t, start, cos, sin], domain="com.microsoft", interleaved=1,
                     num_heads=attn.num_heads) for t in (q, k))
    out = g.op("MultiHeadAttention", [q, k, v, "", keep], domain="com.microsoft", num_heads=attn.num_heads,
               scale=1.0 / float(np.sqrt(attn.head_dim)))
    return _projection(g, out, attn.out_proj, f"{name}.out_proj")


def _cache_inputs(prefix, layers, attn, length):
    return [helper.make_tensor_value_info(f"{prefix}_{kind}_{i}", TensorProto.FLOAT,
                                          ["batch", attn.kv_heads, length, attn.head_dim])
            for i in range(layers) for kind in ("key", "value")]


def _save(g, name, inputs, logits, vocab, presents, attn, path):
    """The graph with the step's outputs (logits, present_*) named, as path."""
    layers = len(presents) // 2
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "new", vocab])]
    outputs += _cache_inputs("present", layers, attn, "length")
    g.nodes += [helper.make_node("Identity", [t], [o.name]) for t, o in zip([logits] + presents, outputs)]
    ids = [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "new"])]
    return _write(g, name, ids + inputs + _cache_inputs("past", layers, attn, "cached"), outputs, path)


def _write(g, name, inputs, outputs, path):
    """The graph of g's nodes and weights, with its inputs and outputs, as path (ONNX's opset and
    ONNX Runtime's contrib ops)."""
    graph = helper.make_graph(g.nodes, name, inputs, outputs, g.weights)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET),
                                                      helper.make_opsetid("com.microsoft", 1)]), str(path))
    return path


def export_language_model_step(lm, path):
    """lm's decoding step (a LanguageModel that supports() admits) written to path: positions up
    to the model's max_len (its RoPE or position table). Returns path."""
    attn = lm.eval().encoder.layers[0].self_attn
    g = _Graph()
    x, presents = _decode(g, _embed(g, lm.embedding, lm.pos_embedding), lm.encoder.layers, lm.encoder.norm)
    head = lm.lm_head.weight if lm.lm_head is not None else lm.embedding.weight
    logits = g.matmul(x, head, "lm_head")
    return _save(g, "lm_step", [], logits, head.shape[0], presents, attn, path)


def export_decoder_step(s2s, path):
    """An EncoderDecoder's decoding step (supports_decoder() admits it) written to path, reading
    the memory as onnx_export's encoder graph gives it (memory_key_i, memory_value_i) and the
    source's padding (B, S) bool, True at padding. Returns path."""
    layers = s2s.eval().decoder.layers
    g = _Graph()
    keep = g.op("Cast", [g.op("Not", ["padding"])], to=TensorProto.INT32)
    memories = [((f"memory_key_{i}", f"memory_value_{i}"), keep) for i in range(len(layers))]
    x, presents = _decode(g, _embed(g, s2s.target_embedding, s2s.target_positions), layers, s2s.decoder.norm,
                          memories)
    logits = g.linear(x, s2s.output.weight, s2s.output.bias, "output")
    cross = layers[0].multihead_attn
    inputs = [helper.make_tensor_value_info("padding", TensorProto.BOOL, ["batch", "letters"])]
    inputs += [helper.make_tensor_value_info(f"memory_{kind}_{i}", TensorProto.FLOAT,
                                             ["batch", cross.kv_heads, "letters", cross.head_dim])
               for i in range(len(layers)) for kind in ("key", "value")]
    return _save(g, "s2s_step", inputs, logits, s2s.output.weight.shape[0], presents, layers[0].self_attn, path)


def export_encoder(s2s, path):
    """An EncoderDecoder's encoder (supports_encoder() admits it) written to path with the traced
    encoder's interface: (source (B, S) ids, padding (B, S) bool, True at padding) -> memory_key_i,
    memory_value_i (B, kv_heads, S, head_dim) for each decoder layer's cross-attention. Each
    self-attention a MultiHeadAttention, each residual sum and its LayerNorm a
    SkipLayerNormalization. Returns path."""
    layers = s2s.eval().encoder.layers
    g = _Graph()
    keep = g.op("Cast", [g.op("Not", ["padding"])], to=TensorProto.INT32)
    x = _embed(g, s2s.source_embedding, s2s.source_positions, "source", prefix="source_",
               span=lambda: (g.const("zero", [0]), g.op("Shape", ["source"], start=1, end=2)))

    def attend(h, i, layer, name):
        return _encoder_attention(g, h, layer.self_attn, keep, name)

    memory = _stack(g, x, _sublayers(g, layers, attend, None), layers[0].norm_first, s2s.encoder.norm)
    outputs, crosses = [], s2s._steppers()[1]
    for i, cross in enumerate(crosses):
        E, KE = cross.embed_dim, cross.kv_heads * cross.head_dim
        shape = g.const(f"heads_{cross.kv_heads}_{cross.head_dim}", [0, 0, cross.kv_heads, cross.head_dim])
        for kind, start in (("key", E), ("value", E + KE)):
            t = g.linear(memory, cross.in_proj_weight[start:start + KE], cross.in_proj_bias[start:start + KE],
                         f"cross.{i}.{kind}")
            t = g.op("Transpose", [g.op("Reshape", [t, shape])], perm=[0, 2, 1, 3])
            outputs.append((f"memory_{kind}_{i}", t, cross))
    g.nodes += [helper.make_node("Identity", [t], [name]) for name, t, _ in outputs]
    inputs = [helper.make_tensor_value_info("source", TensorProto.INT64, ["batch", "letters"]),
              helper.make_tensor_value_info("padding", TensorProto.BOOL, ["batch", "letters"])]
    outs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, ["batch", c.kv_heads, "letters", c.head_dim])
            for name, _, c in outputs]
    return _write(g, "s2s_encoder", inputs, outs, path)
