"""Loads .keras files saved while tf_ops.patch_keras() was active, in a process that never
imports tf_ops, and checks their predictions against the patched model's.

  python load_without_tf_ops.py DIR   (DIR: files.json, inputs.json, expected.npz)
"""

import json
import sys
from pathlib import Path

import numpy as np
import keras

try:
    import keras_hub  # noqa: F401  (its models' classes, where installed)
except ImportError:
    pass

# Absolute tolerance where a model's float32 rounding grows past 1e-6: keras-hub's VAE runs
# 12 GroupNorm + SiLU + conv blocks, and the patched and stock float32 outputs differ by
# ~1.2e-5 at outputs of ~4e-3 (its float64 check: test_patch_models'
# test_matches_stock_keras_to_float32_rounding[VAE]).
ATOL = {"VAE": 5e-5}

directory = Path(sys.argv[1])
files = json.loads((directory / "files.json").read_text())
inputs = json.loads((directory / "inputs.json").read_text())
expected = np.load(directory / "expected.npz")
for name, path in files.items():
    model = keras.models.load_model(path)
    x = inputs[name]
    x = {k: np.asarray(v) for k, v in x.items()} if isinstance(x, dict) else np.asarray(x)
    got = np.asarray(model.predict_on_batch(x))
    np.testing.assert_allclose(got, expected[name], rtol=1e-5, atol=ATOL.get(name, 1e-6),
                               err_msg=name)
    assert not any(m == "tf_ops" or m.startswith("tf_ops.") for m in sys.modules), name
    print(f"{name}: same outputs without tf_ops")
