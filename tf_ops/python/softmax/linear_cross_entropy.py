"""`linear_cross_entropy`: a language-model head and its sparse cross-entropy without
the whole ``[tokens, vocab]`` logits.

The rows (tokens) are taken in chunks, one after the other in a ``tf.while_loop``
(``parallel_iterations=1``): each chunk's logits come from TensorFlow's own matmul
(oneDNN on the CPU, cuBLAS on the GPU), the fused ``TfOps>SparseSoftmaxCrossEntropy`` op
gives the chunk's losses and dlogits in one pass (in the logits' buffer), and more
matmuls turn those into the chunk's rows of dhidden and its part of dkernel (and dbias).
Everything is computed in the forward pass (``tf.custom_gradient``); the backward scales
the saved gradients by the incoming one. The loss is therefore a scalar (the mean over
the rows that are not ignored, or their sum).

Memory: what lives at once is the kernel's float32 gradient, dhidden, one chunk of
logits and one block of the kernel's gradient. The chunk's part of dkernel is not
materialised whole: it is computed one block at a time (`kernel_blocks`: of the
vocabulary for a ``[V, H]`` kernel, a slice of the dlogits' columns times the chunk's
hidden rows; of the features for an ``[H, V]`` one, a slice of the hidden rows' columns
times the dlogits; TensorFlow's matmul again; blocks of at most a quarter of the
chunk's logits or 512K gradients, of the chunk's logits' size from a vocabulary of
100000 on), each block one contiguous row of the float32
accumulator seen as ``[blocks, -1]``, added in place (``InplaceAdd``; a scatter-add
under XLA), the blocks in a fixed order: deterministic. The first chunk's dkernel is
the accumulator's first value, so no zeros are allocated (a ``tf.zeros`` of the
kernel's shape would become a constant of that size in the graph).
Rows per chunk default to 3/16 of the hidden size (the chunk's logits then take 3/16
of the kernel gradient's memory; 7/32 of it from a vocabulary of 100000 on), and at
least enough for 1M logits (`default_chunk_size`, `kernel_blocks`). What that costs in
memory and time against the unfused head: docs/benchmarks.md, "Softmax, cross-entropy
and the LM head" (`python -m tf_ops.bench.softmax`).
"""

from __future__ import annotations

from typing import Optional

import tensorflow as tf
from tf_ops.python.core.composite import use_composite
from tf_ops.python.core.op_support import op_fn
from tf_ops.python.softmax import functions as fn

TensorLike = tf.types.experimental.TensorLike

# Logits per chunk at least (4 MiB of float32): fewer, larger chunks for small hidden
# sizes, whose per-chunk overhead would otherwise dominate.
_MIN_CHUNK_ELEMENTS = 1 << 20
# From this vocabulary on the default chunk is 7/32 of the hidden size, not 3/16
# (default_chunk_size).
_LARGE_VOCAB = 100_000
# fast_chunk_size: a chunk's logits take at most max(the kernel's size, this many).
_FAST_CHUNK_ELEMENTS = 1 << 23
# From this many rows a chunk's matmuls run as large ones (no transposed forms).
_LARGE_CHUNK_ROWS = 256
# A chunk's kernel gradient is computed and added in blocks: at least _BLOCKS of them,
# each of at most a quarter of the chunk's logits (as many gradients as the chunk has
# logits from _LARGE_VOCAB on) or _BLOCK_ELEMENTS gradients (2 MiB of float32), whichever
# is more, unless the vocabulary is shorter than _MIN_BLOCKED_VOCAB
# (then whole); blocks of the features keep at least _MIN_BLOCK_FEATURES of them.
# Why: few blocks cost little time over one matmul plus one add (which would need a
# second kernel-sized buffer), small blocks keep the peak under a quarter of the unfused
# head's, and from _LARGE_VOCAB on, where a chunk's dlogits leave the cache, fewer and
# larger blocks win back the time: the measurements are in docs/benchmarks.md,
# "Measurements behind code choices".
_BLOCKS = 4
_BLOCK_ELEMENTS = 1 << 19
_MIN_BLOCKED_VOCAB = 64
_MIN_BLOCK_FEATURES = 16


def default_chunk_size(rows: int, vocab: int, hidden: int = 512) -> int:
    """Rows per chunk: 3 * hidden // 16 (7 * hidden // 32 from a vocabulary of 100000
    on), at least 1M logits' worth and 16, at most `rows`.

    The peak is the kernel and its gradient, the tokens' hidden rows and dhidden, and one
    chunk's logits with one block of its dkernel; the unfused head's, the kernel, its
    gradient and all the logits. Over T tokens that is about (2 H + chunk rows + block
    rows) / (2 H + T), plus the tokens' own rows, which weigh less the larger the
    vocabulary. The allocator's rounding moves a measured peak by a few MiB from one run
    to the next, so the default keeps a margin under a quarter of the unfused head's.
    Speed: oneDNN's matmul of a chunk's rows by an [H, V] kernel runs at half speed from
    128 rows on with AVX2 (512 x 32000: 110-124 GFLOP/s at 96-112 rows, 59-71 at
    128-160), so the default stays under 128 rows at H = 512. The chunk sizes measured
    against each other: docs/benchmarks.md, "Softmax, cross-entropy and the LM head".

    Example:
      >>> default_chunk_size(4096, 32000, 512), default_chunk_size(4096, 128000, 512)
      (96, 112)
    """
    per_hidden = 7 / 32 if vocab >= _LARGE_VOCAB else 3 / 16
    size = max(16, int(hidden * per_hidden), _MIN_CHUNK_ELEMENTS // max(vocab, 1))
    return int(min(size, rows)) if rows > 0 else int(size)


def fast_chunk_size(vocab: int, hidden: int) -> int:
    """Rows per chunk for speed: a chunk's logits take at most as much memory as the
    kernel's gradient (``hidden`` rows), or 8M logits (32 MiB of float32) where that is
    more. Few, large matmuls, as fast as the unchunked head or faster (measured: keras-hub
    LLaMA and GPT-2 at 1024 tokens, 1.1-1.15x the composite's step), while the head's
    memory stays bounded by about twice the kernel's gradient whatever the number of
    tokens. ``chunk_size="fast"``, what `tf_ops.patch_keras()` trains language models
    with; `default_chunk_size` (a quarter or 5/16 of this, or less) is for the least memory.

    Example:
      >>> fast_chunk_size(32000, 512), fast_chunk_size(8000, 512)
      (524, 1048)
    """
    return int(max(hidden, _FAST_CHUNK_ELEMENTS // max(vocab, 1), 16))


def kernel_blocks(vocab: Optional[int], hidden: Optional[int],
                  transpose_kernel: bool = True, chunk_size: int = 0) -> int:
    """How many equal blocks a chunk's kernel gradient is computed and added in, each one
    contiguous part of the gradient: blocks of the vocabulary for a ``[V, H]`` kernel
    (``transpose_kernel``), of the features for an ``[H, V]`` one. Blocks of at most
    max(512K, chunk_size * V / 4) gradients (chunk_size * V from a vocabulary of 100000
    on), at least 4 of them: for the vocabulary the
    first divisor of V from that count up to twice it; for the features the first
    divisor of H from that count on that leaves at least 16 features a block (thinner
    blocks make slow matmuls), else the largest below it. 1 (whole) when the size is
    unknown, short or has no such divisor.

    Example:
      >>> kernel_blocks(128000, 512, chunk_size=102), kernel_blocks(32000, 512, False, 524)
      (8, 4)
      >>> kernel_blocks(32000, 512, False, 96)  # blocks of 16 features, 2 MiB
      32
    """
    if vocab is None or hidden is None or vocab < _MIN_BLOCKED_VOCAB:
        return 1
    share = 1 if vocab >= _LARGE_VOCAB else 4
    elements = max(_BLOCK_ELEMENTS, chunk_size * vocab // share)
    target = max(_BLOCKS, -(-vocab * hidden // elements))
    if transpose_kernel:
        for count in range(target, min(2 * target, vocab) + 1):
            if vocab % count == 0:
                return count
        return 1
    limit = max(1, hidden // _MIN_BLOCK_FEATURES)  # 1: too few features to block
    start = min(target, limit)
    # The first divisor from the target count up, else the largest below it.
    candidates = [*range(start, limit + 1), *range(start - 1, 1, -1)]
    return next((count for count in candidates if hidden % count == 0), 1)


def linear_cross_entropy(hidden: TensorLike, kernel: TensorLike, labels: TensorLike,
                         bias: Optional[TensorLike] = None, *, transpose_kernel: bool = False,
                         label_smoothing: float = 0.0, ignore_index: int = -100,
                         z_loss: float = 0.0, sample_weight: Optional[TensorLike] = None,
                         reduction: str = "mean", chunk_size: Optional[int | str] = None,
                         return_argmax: bool = False,
                         name: Optional[str] = None) -> tf.Tensor | tuple[tf.Tensor, tf.Tensor]:
    """Cross-entropy of ``hidden @ kernel (+ bias)`` against `labels`, in chunks of rows.

    Args:
      hidden: ``[..., H]`` features of the tokens (flattened to rows).
      kernel: ``[H, V]``, or ``[V, H]`` with ``transpose_kernel=True`` (a head tied to the
        token embedding, as keras-hub's ``ReversibleEmbedding``).
      labels: integer ``[...]``, one per row.
      bias: optional ``[V]``.
      label_smoothing, ignore_index, z_loss: as `tf_ops.sparse_softmax_cross_entropy`.
      sample_weight: optional weights of the rows, of the labels' shape (or one that
        broadcasts to it): each row's loss and gradients are scaled by its weight.
      reduction: ``"mean"`` (the weighted sum over the number of rows not ignored; 0
        when all are: Keras's ``ignore_class``) or ``"sum"``.
      chunk_size: rows per chunk: None (default) for the least memory
        (`default_chunk_size`), ``"fast"`` for speed with the memory still bounded
        (`fast_chunk_size`: what `tf_ops.patch_keras()` trains with), or a number.
      return_argmax: also return each row's most likely class (``argmax`` of its logits,
        int64, of the labels' shape), read from each chunk's logits as they pass: what an
        accuracy metric needs, without computing the logits again.

    The gradients for hidden, kernel and bias are computed in the forward pass and
    accumulated in float32; the result equals
    ``sparse_softmax_cross_entropy(hidden @ kernel + bias, labels)`` reduced. Under XLA
    the rows are padded to whole chunks (ignored rows), so that every chunk has one
    static shape; under `tf_ops.portable()` it is that composite, logits and all. With
    ``return_argmax=True`` the result is ``(loss, argmax)``.

    Example:
      >>> import tf_ops, tensorflow as tf
      >>> h = tf.ones([6, 4]); k = tf.zeros([4, 10]); t = tf.constant([0, 1, 2, 3, 4, -100])
      >>> round(float(tf_ops.linear_cross_entropy(h, k, t, chunk_size=4)), 6)  # log(10)
      2.302585
    """
    if reduction not in ("mean", "sum"):
        raise ValueError(f"linear_cross_entropy: reduction must be 'mean' or 'sum', got "
                         f"{reduction!r} (the gradients are computed in the forward pass)")
    with tf.name_scope(name or "linear_cross_entropy"):
        h = tf.convert_to_tensor(hidden)
        k = tf.convert_to_tensor(kernel)
        t = tf.convert_to_tensor(labels)
        if t.dtype not in (tf.int32, tf.int64):
            t = tf.cast(t, tf.int64)
        if k.dtype != h.dtype:
            k = tf.cast(k, h.dtype)
        if k.shape.rank not in (None, 2):
            raise ValueError(f"linear_cross_entropy: kernel must be 2-D, got shape {k.shape}")
        features = h.shape[-1]
        k_features = k.shape[1] if transpose_kernel else k.shape[0]
        if features is not None and k_features is not None and features != k_features:
            layout = "[V, H]" if transpose_kernel else "[H, V]"
            raise ValueError(f"linear_cross_entropy: hidden's last axis ({features}) must be "
                             f"the kernel's H ({layout}, got {k.shape})")
        h2 = tf.reshape(h, [-1, tf.shape(h)[-1]])
        t1 = tf.reshape(t, [-1])
        b = None if bias is None else tf.cast(tf.convert_to_tensor(bias), h.dtype)
        attrs = fn.cross_entropy_attrs(label_smoothing, ignore_index, z_loss)
        w1 = None
        if sample_weight is not None:
            w = tf.cast(tf.convert_to_tensor(sample_weight), tf.float32)
            w1 = tf.reshape(tf.broadcast_to(w, tf.shape(t)), [-1])
        vocab = k.shape[0] if transpose_kernel else k.shape[-1]
        # The whole composite under tf_ops.portable(), and under XLA where the library
        # has no lowering of the cross-entropy op (built without XLA): XLA fuses it.
        if use_composite("SparseSoftmaxCrossEntropy", fn.XLA_LOWERED):
            logits = tf.matmul(h2, k, transpose_b=transpose_kernel)
            if b is not None:
                logits = logits + b
            losses = tf.cast(fn.sparse_softmax_cross_entropy(logits, t1, **attrs), tf.float32)
            total = tf.reduce_sum(losses if w1 is None else losses * w1)
            count = tf.reduce_sum(tf.cast(tf.not_equal(tf.cast(t1, tf.int64),
                                                       attrs["ignore_index"]), tf.float32))
            loss = total if reduction == "sum" else tf.math.divide_no_nan(total, count)
            if return_argmax:
                return loss, tf.reshape(tf.argmax(logits, axis=-1), tf.shape(t))
            return loss
        rows_static = h2.shape[0]
        if chunk_size is None:
            chunk_size = default_chunk_size(rows_static or 0, vocab or 32000, features or 512)
        elif chunk_size == "fast":
            chunk_size = fast_chunk_size(vocab or 32000, features or 512)
            chunk_size = min(chunk_size, rows_static) if rows_static else chunk_size
        elif isinstance(chunk_size, str):
            raise ValueError(f"linear_cross_entropy: chunk_size must be a number, None or "
                             f"'fast', got {chunk_size!r}")
        chunk_size = int(chunk_size)
        if chunk_size < 1:
            raise ValueError(f"linear_cross_entropy: chunk_size must be >= 1, got {chunk_size}")
        inputs = [h2, k] + ([b] if b is not None else [])
        loss, argmax = _chunked(inputs, t1, w1, transpose_kernel, attrs, reduction,
                                chunk_size, kernel_blocks(vocab, features, transpose_kernel, chunk_size),
                                return_argmax)
        if return_argmax:
            return loss, tf.reshape(argmax, tf.shape(t))
        return loss


def _add_rows(view: tf.Tensor, rows, piece: tf.Tensor, in_xla: bool) -> tf.Tensor:
    """view[rows] += piece, in view's own buffer.

    Outside XLA this is ``InplaceAdd``, which adds into its input's buffer whoever else
    holds it; here that buffer is the accumulator, made by the first chunk's matmul and
    handed from one add to the next, read by nothing else (a plain ``view + piece`` would
    need a second accumulator-sized buffer, and ``TensorStridedSliceUpdate`` was 5x
    slower). XLA updates the loop's buffer in place by itself: a scatter-add there."""
    if in_xla:
        return tf.tensor_scatter_nd_add(view, tf.reshape(rows, [-1, 1]), piece)
    return tf.raw_ops.InplaceAdd(x=view, i=rows, v=piece)


def _chunked(inputs, labels, weights, transpose_kernel, attrs, reduction, chunk_size, blocks,
             with_argmax=False):
    """(loss, each row's argmax or None). `blocks`: how many blocks the kernel's gradient
    is added in (`kernel_blocks`)."""
    has_bias = len(inputs) == 3
    ignore = attrs["ignore_index"]
    # Under XLA every shape must be static: the rows are padded to whole chunks.
    in_xla = tf.__internal__.get_enclosing_xla_context() is not None

    @tf.custom_gradient
    def run(*tensors):
        # Nothing in the forward is differentiated (the gradients are its results): an
        # enclosing tape would otherwise record the loop and build its gradient.
        tensors = [tf.stop_gradient(x) for x in tensors]
        h, k = tensors[0], tensors[1]
        b = tensors[2] if has_bias else None
        rows = tf.shape(h)[0]
        # At least one chunk (of no rows when there are none): it starts the sums.
        chunks = tf.maximum((rows + chunk_size - 1) // chunk_size, 1)
        h_in, t_in, w_in = h, tf.cast(labels, tf.int64), weights
        if in_xla:
            extra = chunks * chunk_size - rows
            h_in = tf.pad(h, [[0, extra], [0, 0]])
            t_in = tf.pad(t_in, [[0, extra]], constant_values=ignore)
            if w_in is not None:
                w_in = tf.pad(w_in, [[0, extra]])

        # The matmuls, each in the orientation oneDNN runs fastest with a chunk's few
        # rows; the transposes are of thin results only, except the tied kernel's
        # logits, which from _LARGE_CHUNK_ROWS rows on are h @ k^T (docs/benchmarks.md,
        # "Measurements behind code choices").
        def logits_of(hc):
            if transpose_kernel and chunk_size >= _LARGE_CHUNK_ROWS:
                return tf.matmul(hc, k, transpose_b=True)
            if transpose_kernel:  # [V, H]
                return tf.transpose(tf.matmul(k, hc, transpose_b=True))
            return tf.matmul(hc, k)

        def dh_of(d):
            if transpose_kernel:
                return tf.matmul(d, k)
            return tf.transpose(tf.matmul(k, d, transpose_b=True))

        def chunk(i):
            """Chunk i's weighted loss sum, kept-row count, dlogits (unweighted), rows of
            h scaled by their weights, rows of dh, the rows' weights (None: 1) and the
            rows' argmax (None unless asked)."""
            start = i * chunk_size
            size = chunk_size if in_xla else tf.minimum(chunk_size, rows - start)
            hc = tf.slice(h_in, [start, 0], [size, -1])
            tc = tf.slice(t_in, [start], [size])
            logits = logits_of(hc)
            if has_bias:
                logits = logits + b
            ids, after = None, []
            if with_argmax:  # read before the loss op reuses the logits' buffer
                ids = tf.argmax(logits, axis=-1)
                after = [ids]
            with tf.control_dependencies(after):
                losses, d = op_fn("SparseSoftmaxCrossEntropy")(logits, tc, **attrs)
            losses = tf.cast(losses, tf.float32)
            count = tf.reduce_sum(tf.cast(tf.not_equal(tc, ignore), tf.float32))
            dh = dh_of(d)
            if w_in is None:
                return tf.reduce_sum(losses), count, d, hc, dh, None, ids
            # A row's weight scales its dlogits; applied to the thin factors instead
            # (dh's rows, h's rows for dkernel, a matvec for dbias), never to d.
            wc = tf.slice(w_in, [start], [size])
            wh = tf.cast(wc, h.dtype)[:, None]
            return tf.reduce_sum(losses * wc), count, d, hc * wh, dh * wh, wc, ids

        def bias_grad(d, wc):
            d32 = tf.cast(d, tf.float32)
            if wc is None:
                return tf.reduce_sum(d32, axis=0)
            return tf.linalg.matvec(d32, wc, transpose_a=True)

        def kernel_grad(d, hc):
            """The chunk's dkernel as float32, in the kernel's layout."""
            if transpose_kernel:
                g = tf.matmul(d, hc, transpose_a=True)
            else:
                g = tf.matmul(hc, d, transpose_a=True)
            return tf.cast(g, tf.float32)

        def accumulate(acc, d, hc):
            """acc + the chunk's dkernel, computed and added one block at a time, each
            block one contiguous row of acc seen as [blocks, -1]: for a [V, H] kernel a
            block of the vocabulary (a slice of d's columns times hc), for an [H, V] one
            a block of the features (a slice of hc's columns times d; d stays in cache
            across them). Blocks of the vocabulary of an [H, V] kernel would be H
            strided rows of it, each added on its own: twice the time, measured."""
            if blocks == 1:
                return acc + kernel_grad(d, hc)
            view = tf.reshape(acc, [blocks, -1])
            if transpose_kernel:
                width = tf.shape(d)[1] // blocks
            else:
                width = tf.shape(hc)[1] // blocks
            for p in range(blocks):
                # Each block after the previous one's add: one block alive at once.
                with tf.control_dependencies([view]):
                    if transpose_kernel:
                        piece = kernel_grad(d[:, p * width:(p + 1) * width], hc)
                    else:
                        piece = kernel_grad(d, hc[:, p * width:(p + 1) * width])
                view = _add_rows(view, [p], tf.reshape(piece, [1, -1]), in_xla)
            return tf.reshape(view, tf.shape(acc))

        # The first chunk's dkernel starts the accumulator (no zeros of its size).
        total, count, d, hc, dh, wc, ids = chunk(0)
        acc_k = kernel_grad(d, hc)
        acc_b = bias_grad(d, wc) if has_bias else tf.zeros([0], tf.float32)
        dh_chunks = tf.TensorArray(h.dtype, size=chunks, infer_shape=False,
                                   element_shape=tf.TensorShape([None, h.shape[-1]]))
        dh_chunks = dh_chunks.write(0, dh)
        # Each chunk's argmax (a placeholder array of one element when not asked).
        id_chunks = tf.TensorArray(tf.int64, size=chunks if with_argmax else 1,
                                   infer_shape=False, element_shape=tf.TensorShape([None]))
        if with_argmax:
            id_chunks = id_chunks.write(0, ids)

        def body(i, total, count, acc_k, acc_b, dh_chunks, id_chunks):
            c_total, c_count, d, hc, dh, wc, ids = chunk(i)
            acc_k = accumulate(acc_k, d, hc)
            if has_bias:
                acc_b += bias_grad(d, wc)
            if with_argmax:
                id_chunks = id_chunks.write(i, ids)
            return (i + 1, total + c_total, count + c_count, acc_k, acc_b,
                    dh_chunks.write(i, dh), id_chunks)

        # The loop's counter waits for the first chunk: TensorFlow runs a loop's
        # iterations one at a time (parallel_iterations=1), but would start the first
        # as soon as its counter is ready, beside the first chunk's matmuls (two chunks
        # of logits alive at once).
        with tf.control_dependencies([acc_k, acc_b, dh_chunks.flow, total]):
            start = tf.identity(tf.constant(1))
        _, total, count, acc_k, acc_b, dh_chunks, id_chunks = tf.while_loop(
            lambda i, *_: i < chunks, body,
            (start, total, count, acc_k, acc_b, dh_chunks, id_chunks),
            parallel_iterations=1)
        dh = dh_chunks.concat()
        argmax = id_chunks.concat()[:rows] if with_argmax else tf.zeros([0], tf.int64)
        if in_xla:
            dh = dh[:rows]
        if reduction == "mean":
            norm = tf.math.divide_no_nan(1.0, count)
            loss = total * norm
        else:
            norm = tf.constant(1.0)
            loss = total

        def grad(upstream, _=None):  # nothing flows back through the argmax
            s = tf.cast(upstream, tf.float32) * norm
            grads = [tf.cast(s, h.dtype) * dh, tf.cast(s * acc_k, k.dtype)]
            if has_bias:
                grads.append(tf.cast(s * acc_b, b.dtype))
            return grads

        return (loss, argmax), grad

    loss, argmax = run(*inputs)
    return loss, (argmax if with_argmax else None)
