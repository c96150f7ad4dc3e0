# SPDX-License-Identifier: Apache-2.0
"""ONNX Runtime's fused Attention node alone (com.microsoft Attention: the packed QKV projection
and the attention, no output projection), timed on one input of B x L x E, beside
`multihead bench attention` on the same shape: what bounds a classifier's cell where ONNX Runtime's
transformer optimizer fused the attention.

    .venv/bin/python bench/ort_attention.py --seq-len 384 --embed-dim 128 --num-heads 4 --threads 2
    build/multihead bench attention --batch 1 --seq-len 384 --embed-dim 128 --num-heads 4 --threads 2

Prints the median of --rounds rounds of --iters calls, in ms.
"""
import argparse
import statistics
import time

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq-len", type=int, default=384)
    ap.add_argument("--embed-dim", type=int, default=128)
    ap.add_argument("--num-heads", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args()
    B, L, E = a.batch, a.seq_len, a.embed_dim
    rng = np.random.default_rng(0)
    weight = (rng.standard_normal((E, 3 * E)) * E ** -0.5).astype(np.float32)
    bias = np.zeros(3 * E, np.float32)
    node = helper.make_node("Attention", ["x", "weight", "bias", "mask"], ["y"], domain="com.microsoft",
                            num_heads=a.num_heads)
    graph = helper.make_graph(
        [node], "attention",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, L, E]),
         helper.make_tensor_value_info("mask", TensorProto.INT32, [B, L])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [B, L, E])],
        [helper.make_tensor("weight", TensorProto.FLOAT, weight.shape, weight.flatten()),
         helper.make_tensor("bias", TensorProto.FLOAT, bias.shape, bias)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = a.threads, 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    feed = {"x": rng.standard_normal((B, L, E)).astype(np.float32), "mask": np.ones((B, L), np.int32)}
    for _ in range(max(20, a.iters // 4)):
        session.run(None, feed)
    times = []
    for _ in range(a.rounds):
        t0 = time.perf_counter()
        for _ in range(a.iters):
            session.run(None, feed)
        times.append((time.perf_counter() - t0) / a.iters * 1e3)
    print(f"ONNX Runtime {ort.__version__} Attention node (QKV projection + attention, no out_proj) B={B} L={L} E={E} "
          f"H={a.num_heads}, {a.threads} threads: {statistics.median(times):.3f} ms (median of {a.rounds} rounds: "
          f"{', '.join(f'{t:.3f}' for t in times)})")


if __name__ == "__main__":
    main()
