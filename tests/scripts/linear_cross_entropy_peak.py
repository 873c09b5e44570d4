"""Peak allocator memory of one forward + backward of `tf_ops.linear_cross_entropy`
(default chunks) and of the unfused head (TensorFlow's matmul and fused cross-entropy),
the inputs and the gradients returned included, at argv[1] tokens x argv[2] hidden x
argv[3] vocabulary, float32. Prints "ours theirs" in bytes. Run by
tests/test_softmax_loss.py in its own process: the BFC allocator may hand a request a
free chunk of up to twice its size, and counts all of it, so what earlier work left
free in the allocator moves the peak."""

import sys

import tensorflow as tf

import tf_ops

tokens, hidden, vocab = (int(v) for v in sys.argv[1:4])
h = tf.random.normal([tokens, hidden])
k = tf.random.normal([hidden, vocab], stddev=0.02)
labels = tf.random.uniform([tokens], 0, vocab, tf.int64)


def peak(head) -> int:
    @tf.function
    def step(h, k):
        with tf.GradientTape() as tape:
            tape.watch([h, k])
            loss = head(h, k)
        return loss, tape.gradient(loss, [h, k])

    # One call, its tracing included: tracing allocates no tensors, and a warm-up call would
    # only leave freed chunks in the allocator (at vocab 128000 it is 40 s of CI's time).
    tf.config.experimental.reset_memory_stats("CPU:0")
    [t.numpy() for t in tf.nest.flatten(step(h, k))]
    return tf.config.experimental.get_memory_info("CPU:0")["peak"]


ours = peak(lambda h, k: tf_ops.linear_cross_entropy(h, k, labels))
theirs = peak(lambda h, k: tf.reduce_mean(
    tf.nn.sparse_softmax_cross_entropy_with_logits(labels, tf.matmul(h, k))))
print(ours, theirs)
