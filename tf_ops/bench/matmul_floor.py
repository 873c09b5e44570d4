"""The floor of a language model's train step under any fusion that keeps TensorFlow's
matmuls: the step's matmuls alone, timed beside the stock and the patched step.

  python -m tf_ops.bench.matmul_floor [--models GPT-2,LLaMA] [--budget SECONDS]
      [--size bench|test]

`tf_ops.patch_keras()` fuses what lies between the matmuls (norms, softmax, the
activations, the loss, the optimizer's update) and leaves the matmuls to TensorFlow
(oneDNN on the CPU), as stock Keras runs them. A train step of the patched model can
therefore take no less than its matmuls, and ``stock / floor`` is the most any such patch
could reach. Where the patched step misses a target, this says whether kernels can still
close the gap (patched well above the floor) or not (at the floor: only faster matmuls
would).

The floor step is read off the keras-hub model's own weights, not restated: per
transformer layer the query, key, value and output projections and the feed-forward
kernels as 2-D matmuls over all the tokens, the attention's two batched matmuls (scores
and values, with the key/value heads shared by their query heads), and the language-model
head (the tied embedding, or the untied kernel) over the whole vocabulary; forward, then
the gradient of every kernel, of the activations between them and of the first
layer's input (the embeddings'). Nothing else runs: no
norm, softmax, activation, bias, loss, embedding lookup or optimizer update (what those
cost at least: the copy floor of the kernel benchmarks). The values it computes mean
nothing; only the shapes of its matmuls are the model's.

Reported per model: the median step times, ``stock / patched`` (the benchmark's ratio)
and ``stock / floor`` (its ceiling) with their interquartile ranges, and the share of
the reachable gain the patch takes, ``(stock / patched - 1) / (stock / floor - 1)``.

Example:
  >>> from tf_ops.bench import model_zoo
  >>> built = model_zoo.build("LLaMA", "test")
  >>> step = floor_step(built.model, built.x)
  >>> loss, grads = step()
  >>> len(grads) == len(floor_kernels(built.model)[0])
  True
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable

import numpy as np

DECODERS = ("GPT-2", "LLaMA")  # model_zoo's causal LMs: what the floor step reads

_ATTENTION = ("query", "key", "value", "attention_output")


def floor_kernels(model) -> tuple[list, list[dict], object, bool]:
    """(every kernel the floor step multiplies by, per layer {role: kernel}, the head's
    kernel, whether the head is the tied [vocab, hidden] embedding).

    Roles: ``query``, ``key``, ``value``, ``attention_output`` (MultiHeadAttention's
    EinsumDense kernels, [H, heads, D] and [heads, D, H]), ``up`` (the feed-forward
    kernels from the hidden size: one, or LLaMA's two, the gate's and the
    intermediate's), ``down`` (back to the hidden size)."""
    backbone = model.backbone
    hidden = backbone.hidden_dim
    layers = []
    for layer in backbone.transformer_layers:
        roles: dict = {"up": []}
        for weight in layer.trainable_weights:
            parts = weight.path.split("/")
            if parts[-1] != "kernel":
                continue
            if parts[-2] in _ATTENTION:
                roles[parts[-2]] = weight
            elif parts[-2].startswith("feedforward"):
                if weight.shape[0] == hidden:
                    roles["up"].append(weight)
                else:
                    roles["down"] = weight
        missing = {*_ATTENTION, "down"} - set(roles)
        if missing or not roles["up"]:
            raise ValueError(f"{layer.name}: no kernels for {sorted(missing) or ['up']}")
        layers.append(roles)
    embedding = backbone.token_embedding
    tied = bool(embedding.tie_weights)
    head = embedding.embeddings if tied else embedding.reverse_embeddings
    kernels = [w for roles in layers for role, w in roles.items() if role != "up"]
    kernels += [w for roles in layers for w in roles["up"]] + [head]
    return kernels, layers, head, tied


def floor_step(model, x) -> Callable[[], tuple]:
    """A ``tf.function`` of no arguments running the matmuls of `model`'s train step on
    inputs `x` (``{"token_ids": [batch, length], ...}``), forward and backward; returns
    (a scalar read off the logits and the input's gradient, the kernels' gradients)."""
    import tensorflow as tf

    kernels, layers, head, tied = floor_kernels(model)
    batch, length = np.shape(x["token_ids"])
    tokens = batch * length
    hidden = model.backbone.hidden_dim
    vocab = head.shape[0] if tied else head.shape[1]
    rng = np.random.default_rng(0)
    h0 = tf.constant(rng.standard_normal((tokens, hidden)).astype("float32"))
    dlogits = tf.constant(rng.standard_normal((tokens, vocab)).astype("float32"))

    def flat(w, shape):  # an EinsumDense kernel as the 2-D matrix it multiplies by
        return tf.reshape(tf.convert_to_tensor(w), shape)

    def heads_of(t, heads):  # [tokens, heads * D] -> [batch, heads, length, D]
        return tf.reshape(t, [batch, heads, length, -1])

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            tape.watch(h0)  # its gradient is the one the embeddings would take
            h = h0
            for roles in layers:
                heads, kv_heads = roles["query"].shape[1], roles["key"].shape[1]
                q = heads_of(h @ flat(roles["query"], [hidden, -1]), heads)
                k = heads_of(h @ flat(roles["key"], [hidden, -1]), kv_heads)
                v = heads_of(h @ flat(roles["value"], [hidden, -1]), kv_heads)
                # The query heads of one key/value head as one batch axis: broadcasting
                # batched matmuls, the FLOPs of the repeated heads.
                q = tf.reshape(q, [batch, kv_heads, heads // kv_heads, length, -1])
                k, v = k[:, :, None], v[:, :, None]
                a = tf.matmul(tf.matmul(q, k, transpose_b=True), v)
                h = tf.reshape(a, [tokens, -1]) @ flat(roles["attention_output"], [-1, hidden])
                u = h @ roles["up"][0]
                for gate in roles["up"][1:]:
                    u = u + h @ gate
                h = u @ roles["down"]
            logits = tf.matmul(h, head, transpose_b=tied)
        *grads, dh0 = tape.gradient(logits, kernels + [h0], output_gradients=dlogits)
        # The logits must be read, or the head's forward matmul would be pruned; so must
        # dh0, or the first layer's input gradients would.
        return tf.reduce_sum(logits[:, :1]) + tf.reduce_sum(dh0[:1]), grads

    return step


def measure(name: str, size: str, budget: float, out=print) -> dict:
    """Stock, patched and floor steps of model `name`, timed in interleaved rounds."""
    import keras

    import tf_ops
    from tf_ops.bench import model_zoo
    from tf_ops.bench.timing import ratio_quartiles, time_interleaved

    stock, patched = model_zoo.twins(name, size)
    for built in (stock, patched):
        built.model.compile(optimizer=keras.optimizers.Adam(1e-4), loss=built.loss)
    x, y = stock.x, stock.y
    floor = floor_step(stock.model, x)

    def patched_step():
        with tf_ops.patch_keras():
            patched.model.train_on_batch(x, y)
        return ()

    calls = {"stock": lambda: (stock.model.train_on_batch(x, y), ())[1],
             "patched": patched_step, "floor": lambda: floor()[0]}
    timings = time_interleaved(calls, 7, 61, budget)
    result = {"model": name, "rounds": len(timings["stock"].samples)}
    for label in calls:
        result[f"{label}_ms"] = timings[label].median * 1e3
    for label in ("patched", "floor"):
        result[label] = ratio_quartiles(timings["stock"], timings[label])
    reachable = result["floor"][1] - 1
    result["share"] = (result["patched"][1] - 1) / reachable if reachable > 0 else float("nan")
    out(f"{name:<6} stock {result['stock_ms']:7.1f} ms  patched {result['patched_ms']:7.1f} "
        f"ms  floor {result['floor_ms']:7.1f} ms  stock/patched {result['patched'][1]:.3f}x "
        f"[{result['patched'][0]:.3f}-{result['patched'][2]:.3f}]  stock/floor "
        f"{result['floor'][1]:.3f}x [{result['floor'][0]:.3f}-{result['floor'][2]:.3f}]  "
        f"share of the reachable gain {result['share']:.0%}  ({result['rounds']} rounds)")
    return result


def main(argv: list[str] | None = None) -> int:
    from tf_ops.bench import model_zoo

    p = argparse.ArgumentParser(prog="python -m tf_ops.bench.matmul_floor",
                                description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default=",".join(DECODERS),
                   help=f"comma-separated, of {', '.join(DECODERS)}")
    p.add_argument("--budget", type=float, default=45.0,
                   help="seconds of timed rounds per model (default 45)")
    p.add_argument("--size", choices=model_zoo.SIZES, default="bench",
                   help="the models' size (model_zoo): bench (default) or test (tiny)")
    args = p.parse_args(argv)
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    unknown = sorted(set(names) - set(DECODERS))
    if unknown:
        p.error(f"unknown models {unknown}; the floor step reads {', '.join(DECODERS)}")
    if not model_zoo.keras_hub_available():
        print("keras-hub is not installed: its models are skipped")
        return 0
    import os

    import tensorflow as tf

    from tf_ops.bench.machine import cpu_name

    print(f"{cpu_name()}, {os.cpu_count()} cores, TensorFlow {tf.__version__}")
    for name in names:
        measure(name, args.size, args.budget)
    return 0


if __name__ == "__main__":
    sys.exit(main())
