"""The benchmark suite runs and reports what it promises (no timing asserts:
speed is measured by `make bench`, never by tests)."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

from subprocesses import REPO_ROOT, python_env

from tf_ops.bench.cases import CASES
from tf_ops.python.core.library import load_library


def _bench(*args: str) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [sys.executable, "-m", "tf_ops.bench", *args],
        env=python_env(), cwd=REPO_ROOT, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


@pytest.mark.heavy  # a benchmark process
def test_small_run_writes_table_json_and_plot(tmp_path):
    out_json, out_png = tmp_path / "bench.json", tmp_path / "bench.png"
    result = _bench(
        "--ops", "leaky_relu,gelu", "--dtypes", "float32,float16", "--sizes", "10",
        "--reps", "2,2", "--budget", "0", "--json", str(out_json), "--plot", str(out_png),
    )
    table = [line for line in result.stdout.splitlines() if line.startswith("| ")]
    assert table[0].startswith("| op | dtype | size | pass | tf_ops ms | TF ms | vs TF | XLA ms")
    assert len(table) == 1 + 2 * 2 * 4, result.stdout  # header + ops x dtypes x passes
    data = json.loads(out_json.read_text())
    assert data["machine"]["allocator"] == "default"
    assert data["machine"]["cpu_isa"] in ("baseline", "avx2", "avx512")
    rows = data["rows"]
    assert {(r["op"], r["dtype"], r["pass"]) for r in rows} == {
        (o, d, p) for o in ("leaky_relu", "gelu") for d in ("float32", "float16")
        for p in ("forward", "grad", "fwd+bwd", "second")
    }
    for r in rows:
        assert r["size_log2"] == 10 and r["reps"] == 2
        for name in ("tf_ops", "tf", "xla", "tf_ops_eager", "tf_eager", "copy", "portable"):
            assert r["ms"][name] > 0, (name, r)
        for ratio in ("vs_tf", "vs_xla", "eager_vs_tf", "x_floor", "portable_cost"):
            assert r[ratio] > 0
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.heavy  # a benchmark process
def test_second_pass_and_jit_columns(tmp_path):
    """The second-order pass times y, dy/dx and d2y/dx2 through nested tapes for
    tf_ops (tf.function, eager, and under jit) against TF's composite in
    tf.function, eagerly and under XLA; the table shows the jit ratio."""
    out_json = tmp_path / "bench.json"
    result = _bench("--ops", "swish,mish", "--dtypes", "float32", "--sizes", "10", "--passes", "second",
                    "--reps", "2,2", "--budget", "0", "--json", str(out_json))
    table = [line for line in result.stdout.splitlines() if line.startswith("| ")]
    header = [c.strip() for c in table[0].strip("|").split("|")]
    assert "tf_ops jit ms" in header and "jit vs XLA" in header
    assert len(table) == 1 + 2 and all("| second |" in line for line in table[1:])
    for r in json.loads(out_json.read_text())["rows"]:
        assert r["pass"] == "second"
        for name in ("tf_ops", "tf", "xla", "tf_ops_eager", "tf_eager", "tf_ops_xla", "copy"):
            assert r["ms"][name] > 0, (name, r)
        assert r["jit_vs_xla"] > 0 and r["vs_xla"] > 0


def test_second_pass_computes_second_derivatives():
    """What the pass times is right: tf_ops's and TF's (y, dy/dx, d2y/dx2) agree."""
    import numpy as np
    import tensorflow as tf

    from tf_ops.bench.cases import second_order

    x = tf.constant(np.linspace(-4.0, 4.0, 33), tf.float64)
    for name in ("gelu", "gelu_tanh", "swish", "mish", "hard_swish"):
        case = CASES[name]
        ours, theirs = tf.function(second_order(case.ours))(x), second_order(case.theirs)(x)
        for a, b in zip(ours, theirs):
            # atol: TF's own float64 gelu is accurate to ~5e-8 only.
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-7, err_msg=name)


@pytest.mark.heavy  # a benchmark process
def test_bfc_allocator_reruns_with_it(tmp_path):
    out_json = tmp_path / "bench.json"
    _bench("--allocator", "bfc", "--ops", "elu", "--dtypes", "bfloat16", "--sizes", "10",
           "--passes", "grad", "--reps", "1,1", "--budget", "0", "--json", str(out_json))
    data = json.loads(out_json.read_text())
    assert data["machine"]["allocator"] == "bfc"
    assert data["machine"]["tf_cpu_allocator_use_bfc"] == "true"


@pytest.mark.heavy  # a benchmark process
def test_rejects_unknown_op():
    result = subprocess.run(
        [sys.executable, "-m", "tf_ops.bench", "--ops", "relu7"],
        env=python_env(), cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode != 0
    assert "unknown op" in result.stderr and "leaky_relu" in result.stderr


def test_every_forward_op_has_a_benchmark_case():
    """A new activation must come with its benchmark row (docs/adding-an-op.md)."""
    module = load_library()
    forward_ops = {
        name[len("tf_ops_"):] for name in dir(module)
        if name.startswith("tf_ops_") and not name.endswith(("_grad", "_eager_fallback"))
    }
    assert forward_ops, dir(module)
    # Each family's forward ops are timed by the bench its manifest names (tf_ops.bench.norm,
    # ...; the fused ops by tf_ops.bench.fused, which makes its cases from the activation
    # table), or by tf_ops.bench's table (CASES, the activations).
    from tf_ops.python.core.family import families
    from tf_ops.python.core.op_info import snake_case

    claimed = set()
    for family in families():
        ops = {snake_case(op) for op in family.op_names()} & forward_ops
        claimed |= ops
        benched = set(importlib.import_module(family.bench).BENCHED_OPS) if family.bench else set()
        if family.bench_cases:
            benched |= set(CASES)
        assert ops, f"family {family.name} has no forward op"
        assert ops <= benched, f"no {family.name} benchmark for {sorted(ops - benched)}"
    assert forward_ops <= claimed, f"ops of no family: {sorted(forward_ops - claimed)}"


def test_portable_candidate_runs_builtin_ops_only():
    """The 'portable' column times what an export under tf_ops.portable() runs: no
    TfOps> op in its graph, the fused op's values."""
    import numpy as np
    import tensorflow as tf

    from tf_ops.bench.cases import forward_backward
    from tf_ops.bench.suite import _portable

    x = tf.constant(np.linspace(-4.0, 4.0, 33), tf.float32)
    for name, case in CASES.items():
        fn = forward_backward(case.ours)
        traced = _portable(fn, (x, x))
        graph = traced.get_concrete_function(x, x).graph.as_graph_def()
        types = {n.op for n in graph.node} | {n.op for f in graph.library.function for n in f.node_def}
        assert not [t for t in types if t.startswith("TfOps>")], (name, sorted(types))
        for a, b in zip(traced(x, x), fn(x, x)):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-6, err_msg=name)


def test_norm_bench_reports_the_memory_floor(capsys):
    """The norm benchmark's rows carry the case's floor (its least traffic at a copy's
    speed) and both ratios to it."""
    from tf_ops.bench import norm as norm_bench

    norm_bench.main(["--shapes", "64x32", "--dtypes", "float32", "--kinds", "rms_norm",
                     "add_layer_norm", "--budget-s", "0"])
    rows = [line for line in capsys.readouterr().out.splitlines() if "[64, 32]" in line]
    assert len(rows) == 2 and all("floor" in r and "Keras graph" in r for r in rows), rows
    assert set(norm_bench.PASSES) == set(norm_bench.KINDS)


def test_timing_waits_for_outputs_without_copying_them(monkeypatch):
    """The timing waits for a candidate's outputs but never reads them whole: a copy of
    every output into NumPy is a constant added to each candidate's time."""
    import tensorflow as tf

    from tf_ops.bench import timing

    class Output:  # an output that must not be read
        def numpy(self):
            raise AssertionError("the timing copied an output")

    if hasattr(tf.test.experimental, "sync_devices"):
        timing._wait([Output(), Output()])
    # Without sync_devices (TensorFlow < 2.13): one element of each output is read.
    monkeypatch.delattr(tf.test.experimental, "sync_devices", raising=False)
    timing._wait([tf.zeros([3, 4]), tf.zeros([0]), (tf.ones([2]),)])


def test_batch_norm_grid_runs_the_grid(monkeypatch):
    """`python -m tf_ops.bench.batch_norm --grid` times every cell of channels x sizes
    (swish, batch 8), and without it the named cases."""
    from tf_ops.bench import batch_norm as bench

    ran = []
    monkeypatch.setattr(bench, "bench_layers", lambda cases, *_: ran.append(list(cases)))
    bench.main(["--grid", "--dtypes", "float32"])
    bench.main(["--cases", "b0_28", "--dtypes", "float32"])
    assert ran[0] == list(bench.GRID)
    assert len(ran[0]) == len(bench.GRID_CHANNELS) * len(bench.GRID_SIZES)
    assert bench.GRID["c240_28"][0] == bench.CASES["b0_28"][0] == (8, 28, 28, 240)
    assert ran[1] == ["b0_28"]


def test_coverage_kink_rule():
    """The zoo's exactness verdict for a model whose gradients alone were further than 3x
    stock's on the first input (a pre-activation at a kink, landed on the other side):
    exact when one other input is within the bound and every input's outputs are; not
    where the gradients are off on every input (a systematic error), nor where an
    output is."""
    from tf_ops.bench import coverage

    stock = {"output": 1e-5, "grad": 5e-5, "state": 2e-8}
    close = {"output": 8e-6, "grad": 4e-5, "state": 2e-8}
    kinked = {"output": 8e-6, "grad": 1.4e-3, "state": 2e-8}
    assert coverage._within(close, stock) and not coverage._within(kinked, stock)
    assert coverage._gradients_alone(kinked, stock)
    assert not coverage._gradients_alone({**close, "output": 1e-3}, stock)
    # Stock's own run may be the one a kink moves on another input.
    assert coverage._exact_on_others([({**stock, "grad": 9.6e-3}, close), (stock, kinked)])
    assert not coverage._exact_on_others([(stock, kinked), (stock, kinked)])
    assert not coverage._exact_on_others([(stock, close), (stock, {**close, "output": 1e-3})])
