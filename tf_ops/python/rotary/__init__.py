"""The rotary position embedding: functions, gradients, the Keras layer."""
