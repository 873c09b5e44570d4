"""The model benchmark (`python -m tf_ops.bench.models`) runs end to end and writes what it
promises: the table, the chart, the JSON, skipped models named; and its op-time profile
sums the profiler's trace per op type (no timing asserts: speed is measured by the
benchmark, never by tests)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from subprocesses import REPO_ROOT, python_env
from tf_ops.bench import models, op_profile


@pytest.mark.slow
def test_smoke_run_writes_table_chart_and_json(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "tf_ops.bench.models", "--models", "GPT-2", "--size", "test",
         "--quick", "--budget", "0", "--out", str(tmp_path)],
        env=python_env(), cwd=REPO_ROOT, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    table = (tmp_path / "models.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("| GPT-2 |")]
    assert [r.split(" | ")[1:3] for r in rows] == [
        ["train", "graph"], ["predict", "graph"], ["train", "jit"], ["predict", "jit"]]
    data = json.loads((tmp_path / "models.json").read_text())
    for row in data["rows"]:
        assert row["ratio"] > 0 and row["low"] <= row["ratio"] <= row["high"]
        assert row["stock_mib"] > 0 and row["patched_mib"] > 0  # the BFC allocator's stats
        assert row["rounds"] >= 3
    assert (tmp_path / "models.png").read_bytes().startswith(b"\x89PNG")


def test_unknown_model_is_refused(capsys):
    with pytest.raises(SystemExit) as exit_:
        models._parse(["--models", "VGG"])
    assert exit_.value.code == 2 and "unknown models ['VGG']" in capsys.readouterr().err


def test_table_marks_targets_met_and_missed(tmp_path):
    rows = [models.Row("ResNet50", "train", "graph", 1.2, 1.1, 1.3, 7, 100.0, 83.0, 900.0,
                       700.0, target=1.15),
            models.Row("LLaMA", "train", "graph", 1.3, 1.2, 1.4, 7, 100.0, 77.0, 900.0,
                       800.0, target=1.15, memory_target=0.7),
            models.Row("LLaMA", "train", "jit", 0.98, 0.9, 1.05, 7, 100.0, 102.0)]
    text = models.markdown(rows, {"cpu": "x", "cores": 2, "tensorflow": "2", "keras": "3"})
    lines = [line for line in text.splitlines() if line.startswith("| ResNet50") or
             line.startswith("| LLaMA")]
    assert lines[0].endswith("≥ 1.15× ✓ |")
    assert lines[1].endswith("≥ 1.15×, ≤ 70% memory ✗ |")  # fast enough, but 89% memory
    assert lines[2].endswith("|  |")
    models.plot(rows, tmp_path / "chart.png")
    assert (tmp_path / "chart.png").stat().st_size > 10_000


def test_runs_merge_from_json_and_the_table_goes_between_the_readme_markers(tmp_path):
    machine = {"cpu": "x", "cores": 2, "tensorflow": "2", "keras": "3"}
    old = [models.Row("GPT-2", "train", "graph", 1.1, 1.0, 1.2, 5, 10.0, 9.0),
           models.Row("GPT-2", "train", "jit", 0.9, 0.8, 1.0, 5, 10.0, 11.0)]
    new = [models.Row("GPT-2", "train", "jit", 1.05, 1.0, 1.1, 5, 10.0, 9.5)]
    paths = []
    for i, rows in enumerate((old, new)):
        paths.append(tmp_path / f"run{i}.json")
        paths[-1].write_text(json.dumps({"machine": machine, "rows": [
            {**dataclasses.asdict(r), "memory_ratio": None} for r in rows]}))
    rows, _ = models.load_rows([str(p) for p in paths])
    assert [(r.mode, r.ratio) for r in rows] == [("graph", 1.1), ("jit", 1.05)]
    readme = f"# t\n{models.TABLE_START}\nold table\n{models.TABLE_END}\nrest\n"
    spliced = models.splice_table(readme, models.markdown(rows, machine))
    assert "old table" not in spliced and spliced.endswith(f"{models.TABLE_END}\nrest\n")
    assert "| GPT-2 | train | jit | **1.05×** |" in spliced
    with pytest.raises(ValueError, match="markers"):
        models.splice_table("# no markers\n", "table")


def test_op_time_sums_the_trace_per_op_type():
    f = tf.function(lambda x: tf.nn.relu(tf.matmul(x, x)))
    x = tf.ones([128, 128])
    f(x)
    profile = op_profile.op_time(lambda: f(x), calls=2)
    # TensorFlow runs the matmul as _MklMatMul where oneDNN takes it (AVX-512 CPUs).
    matmul = "_MklMatMul" if "_MklMatMul" in profile.by_type else "MatMul"
    assert {matmul, "Relu"} <= set(profile.by_type)
    assert profile.by_category["matmul/conv"] == profile.by_type[matmul]
    assert op_profile.category("TfOps>BatchNormTrainingGrad") == "tf_ops batch norm"
    assert op_profile.category("TfOps>BiasGelu") == "tf_ops activation"
    # oneDNN's names for the einsums and the convolutions' backward count as matmul/conv
    for name in ("_MklEinsum", "_MklNativeConv2DBackpropFilterWithBias",
                 "_MklNativePadWithFusedConv2D", "Conv2DBackpropInput"):
        assert op_profile.category(name) == "matmul/conv", name
    assert "matmul/conv" in profile.table()


@pytest.mark.parametrize("name", ["GPT-2", "LLaMA"])
def test_matmul_floor_multiplies_by_every_kernel_of_the_model(name):
    """The floor step (`python -m tf_ops.bench.matmul_floor`) is read off the model: per
    layer q, k, v, the attention output, the feed-forward kernels (LLaMA's gate too),
    and the head (GPT-2's tied embedding, LLaMA's untied kernel); each gets a gradient
    of its shape, and the forward keeps the head's matmul."""
    pytest.importorskip("keras_hub")
    from tf_ops.bench import matmul_floor, model_zoo

    built = model_zoo.build(name, "test")
    kernels, layers, head, tied = matmul_floor.floor_kernels(built.model)
    ups = 2 if name == "LLaMA" else 1
    assert [len(roles["up"]) for roles in layers] == [ups] * len(layers)
    assert len(kernels) == len(layers) * (5 + ups) + 1
    assert tied == (name == "GPT-2")
    assert head.path.endswith("embeddings" if tied else "reverse_embeddings")
    step = matmul_floor.floor_step(built.model, built.x)
    value, grads = step()
    assert [tuple(g.shape) for g in grads] == [tuple(k.shape) for k in kernels]
    graph = step.get_concrete_function().graph
    types = [op.type for op in graph.get_operations()]
    # Forward: per layer 3 projections, 2 attention products, the output projection and
    # the feed-forward's, and the head; backward: two per forward matmul (down to the
    # first layer's input, whose gradient the embeddings take).
    assert types.count("MatMul") + types.count("BatchMatMulV2") == 3 * (
        len(layers) * (7 + ups) + 1)
    assert np.isfinite(float(value))


def test_matmul_floor_refuses_other_models(capsys):
    from tf_ops.bench import matmul_floor

    with pytest.raises(SystemExit) as exit_:
        matmul_floor.main(["--models", "BERT"])
    assert exit_.value.code == 2 and "unknown models ['BERT']" in capsys.readouterr().err


def test_twins_share_weights_and_ratios_are_per_round():
    from tf_ops.bench import model_zoo
    from tf_ops.bench.timing import Timing, ratio_quartiles

    stock, patched = model_zoo.twins("MobileNetV3Small", "test")
    assert stock.model is not patched.model
    for a, b in zip(stock.model.variables, patched.model.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    # Per-round ratios (2, 1, 4, 3), not a ratio of medians.
    assert ratio_quartiles(Timing([2.0, 1.0, 8.0, 3.0]), Timing([1.0, 1.0, 2.0, 1.0])) == (
        1.75, 2.5, 3.25)
    assert ratio_quartiles(Timing([3.0]), Timing([2.0])) == (1.5, 1.5, 1.5)
