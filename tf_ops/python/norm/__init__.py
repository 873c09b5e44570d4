"""Layer normalisation and RMS normalisation: functions, gradients, Keras layers."""
