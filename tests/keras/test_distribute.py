"""tf_ops layers under tf.distribute: MirroredStrategy on two logical CPUs (also
`tf_ops.patch_keras()`'s fit step of keras-hub's causal LMs), and
MultiWorkerMirroredStrategy with two worker processes on 127.0.0.1.

Both run in subprocesses: logical devices and a multi-worker cluster must be set
up before TensorFlow initialises, which this test process already did."""

from __future__ import annotations

import importlib.util
import json
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf
import keras

from subprocesses import REPO_ROOT, SCRIPTS, python_env, run_python

# Every test starts processes (a strategy's devices, workers): make test only, not test-quick.
pytestmark = pytest.mark.heavy

WORKER_TIMEOUT_S = 300  # whole cluster, start-up included; this machine may be busy


def test_mirrored_strategy_matches_single_device(tmp_path):
    out = tmp_path / "mirrored.json"
    run_python(SCRIPTS / "mirrored_fit.py", out, timeout=300)
    result = json.loads(out.read_text())
    assert result["replicas"] == 2
    assert result["mirrored_variables"] == "MirroredVariable"
    # The op ran on each replica's own device, on that replica's values.
    devices = [tf.DeviceSpec.from_string(d) for d in result["replica_devices"]]
    assert [(d.device_type, d.device_index) for d in devices] == [("CPU", 0), ("CPU", 1)]
    assert result["replica_values"][0] == [[0.0] * 3] * 2
    np.testing.assert_allclose(result["replica_values"][1], 0.8413447, rtol=1e-6)
    # Same data, batches and initial weights: the same training, up to summation order.
    np.testing.assert_allclose(result["mirrored_loss"], result["single_loss"], rtol=1e-4)
    assert result["weights_moved"] > 1e-3
    assert result["max_weight_difference"] < 1e-4


def test_patched_causal_lm_fit_under_mirrored_strategy(tmp_path):
    """tf_ops.patch_keras()'s fit step of keras-hub's causal LMs scales its loss by the
    replicas as Keras's losses do: the same losses and weights as stock Keras's step."""
    pytest.importorskip("keras_hub")
    out = tmp_path / "mirrored_causal_lm.json"
    run_python(SCRIPTS / "mirrored_causal_lm_fit.py", out, timeout=300)
    result = json.loads(out.read_text())
    assert result["replicas"] == 2
    np.testing.assert_allclose(result["patched_loss"], result["stock_loss"], rtol=2e-5)
    assert result["max_weight_difference"] < 2e-5


def free_ports(count: int) -> list[int]:
    """Ports the OS reports free (held open together, so they are distinct)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def load_worker_module():
    spec = importlib.util.spec_from_file_location("multi_worker_fit", SCRIPTS / "multi_worker_fit.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_multi_worker_mirrored_strategy_two_workers(tmp_path):
    cluster = {"worker": [f"127.0.0.1:{port}" for port in free_ports(2)]}
    outputs = [tmp_path / f"worker{i}.npz" for i in range(2)]
    logs = [open(tmp_path / f"worker{i}.log", "w+") for i in range(2)]
    configs = [json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}}) for i in range(2)]
    workers = [
        subprocess.Popen(
            [sys.executable, str(SCRIPTS / "multi_worker_fit.py"), str(outputs[i])],
            env=python_env(TF_CONFIG=configs[i]),
            cwd=REPO_ROOT,
            stdout=logs[i],
            stderr=subprocess.STDOUT,
        )
        for i in range(2)
    ]
    deadline = time.monotonic() + WORKER_TIMEOUT_S
    try:
        codes = [w.wait(timeout=max(1.0, deadline - time.monotonic())) for w in workers]
    except subprocess.TimeoutExpired:
        codes = None
    finally:
        for w in workers:  # a worker whose peer died waits for it forever
            if w.poll() is None:
                w.kill()
                w.wait()
    text = []
    for i, log in enumerate(logs):
        log.seek(0)
        text.append(f"--- worker {i}\n{log.read()[-4000:]}")
        log.close()
    assert codes is not None, f"the workers ran past {WORKER_TIMEOUT_S} s\n" + "\n".join(text)
    assert codes == [0, 0], f"worker exit codes {codes}\n" + "\n".join(text)

    results = [dict(np.load(path)) for path in outputs]
    assert all(r["replicas"] == 2 for r in results)
    names = sorted(k for k in results[0] if k.startswith("w"))
    assert names and sorted(k for k in results[1] if k.startswith("w")) == names
    # Both workers applied the same all-reduced gradients: identical weights and losses.
    for name in names:
        np.testing.assert_array_equal(results[0][name], results[1][name], err_msg=name)
    np.testing.assert_array_equal(results[0]["loss"], results[1]["loss"])

    # And the same training as one process over the same global batches.
    worker = load_worker_module()
    model = keras.Sequential(worker.layers())
    initial = model.get_weights()
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse", jit_compile=False)
    model.fit(worker.dataset(), epochs=worker.EPOCHS, shuffle=False, verbose=0)
    for i, (start, single) in enumerate(zip(initial, model.get_weights())):
        assert not np.allclose(results[0][f"w{i}"], start), f"w{i} did not train"
        np.testing.assert_allclose(results[0][f"w{i}"], single, rtol=1e-4, atol=1e-5, err_msg=f"w{i}")
