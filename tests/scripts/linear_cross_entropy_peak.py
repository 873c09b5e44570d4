"""Peak allocator memory of one forward + backward of `tf_ops.linear_cross_entropy`
(default chunks) and of the unfused head (TensorFlow's matmul and fused cross-entropy),
the inputs and the gradients returned included, at argv[1] tokens x argv[2] hidden x
argv[3] vocabulary, float32. Prints "ours theirs" in bytes. Run by
tests/softmax/test_softmax_loss.py in its own process: the BFC allocator may hand a request a
free chunk of up to twice its size, and counts all of it, so what earlier work left
free in the allocator moves the peak."""

import sys

import tensorflow as tf

from tf_ops.bench.softmax import linear_cross_entropy_heads, peak_memory

tokens, hidden, vocab = (int(v) for v in sys.argv[1:4])
h = tf.random.normal([tokens, hidden])
k = tf.random.normal([hidden, vocab], stddev=0.02)
labels = tf.random.uniform([tokens], 0, vocab, tf.int64)
heads = linear_cross_entropy_heads(labels)
print(peak_memory(heads["default"], h, k), peak_memory(heads["tf"], h, k))
