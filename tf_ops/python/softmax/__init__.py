"""The softmax family: softmax, log_softmax, scaled masked softmax, sparse softmax
cross-entropy, linear_cross_entropy; their gradients, the Keras layer and loss."""
