"""The zoo's coverage table: every keras-hub backbone (and causal LM) and every
keras.applications model, at a tiny size with random weights, under
``tf_ops.patch_keras()``: what runs fused, what is left and why, whether it is exact,
and how attention runs; ``docs/models.md`` is its output.

    python -m tf_ops.bench.coverage                 # every group, then docs/models.md
    python -m tf_ops.bench.coverage --group hub:0/4 --json out.json   # one group
    python -m tf_ops.bench.coverage --speed         # also the train-step speed-ups
                                                    # (without: the doc's are kept)
    python -m tf_ops.bench.coverage --speed --reuse # only they, on the last run's rows

Each group runs in a process of its own (``--all`` starts them), so memory and
Keras's global state stay per group. Exact: the patched float32 forward and backward
(outputs, every gradient, the state after it) is no further from the same model run in
float64 than stock Keras's float32 step is (within 3x plus 1e-6, as
tests/keras/test_patch_models.py checks the model benchmark's seven). Fused and left are
`tf_ops.patch_summary`'s rows; the attention column reads the ops of the traced
forward and backward graph. tests/keras/test_coverage.py keeps docs/models.md true.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import contextlib
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "models.md"
HUB_GROUPS, APP_GROUPS = 4, 3
# One model per kind, for the train-step speed-up (graph mode, tiny size).
SPEED = ("Qwen3Backbone CausalLM", "BertBackbone", "T5Backbone", "ViTBackbone",
         "MobileNetV2", "WhisperBackbone")
# What was found about a row that is not exact, or exact by the other inputs (the
# table prints it in the row's exact column, whatever this machine's rounding gave).
NOTES = {
    "MobileNetV3Large": "on the first input its gradients alone are 34x further from "
                        "float64 than stock's (2.9e-4, stock 8.4e-6), on two others as "
                        "close (7.2e-6 / 7.1e-6, 7.2e-6 / 8.6e-6): a kink, as MobileNetV2's; "
                        "exact by the check's rule (an other input within 3x)",
    "MobileNetV2": "a kink: on the first input one ReLU6 input is 7.7e-8 from 0 in "
                   "float64; the patched float32 run puts it at -1.9e-7 (stock at +1.0e-6, "
                   "further off, on its side), so that element's gradient drops out and "
                   "every weight upstream moves (gradients 1.4e-3 from float64, stock "
                   "4.7e-5); on the second input stock's run is the one a kink moves "
                   "(9.6e-3, patched 4.1e-5), on the third both 4.6e-5; the patched "
                   "forward is the closer one (3.7e-7 rms at that layer, stock 4.6e-7); "
                   "exact by the check's rule (an other input within 3x)",
    "InceptionResNetV2": "at 75x75 its float32 run is itself 5% off float64 (gradients; "
                         "batch norms over 1x1 positions of a batch of 2), the patched one "
                         "15% (0.146, 0.050: 2.9x, within the check's 3x; with TensorFlow's "
                         "oneDNN off, 4.4x on that input, within 3x on two others)",
    "Gemma3nBackbone CausalLM": "yes, to stock float32 (its rounding): keras-hub's "
                                "Gemma3nCausalLM computes its logits with the tied embedding's "
                                "initial value, captured as a constant when the functional "
                                "model is built (doubling the embedding variable moves the "
                                "logits 0.035, through the input embedding alone; 0.32 "
                                "expected), so the float64 twin, given the float32 weights, "
                                "keeps its own initial head (outputs 1.3 off, relative): a "
                                "keras-hub bug, open",
}
# Stock float32's outputs this far (relative) from the float64 twin's: not rounding, the
# twin computes another function (then patched is compared with stock float32).
OTHER_FUNCTION = 0.1
ATTENTION_OPS = ("TfOps>Attention", "TfOps>ScaledMaskedSoftmax", "TfOps>Softmax")


def groups() -> list[str]:
    return ([f"hub:{i}/{HUB_GROUPS}" for i in range(HUB_GROUPS)]
            + [f"apps:{i}/{APP_GROUPS}" for i in range(APP_GROUPS)])


def names_of(group: str) -> list[str]:
    """The models of `group` (``hub:i/n`` or ``apps:i/n``): every n-th from the i-th."""
    from tf_ops.bench import zoo_build

    source, _, part = group.partition(":")
    i, n = (int(v) for v in part.split("/"))
    if source == "hub":
        names = []
        for backbone in zoo_build.hub_names():
            names.append(backbone)
            if zoo_build._causal_lm_class(backbone) is not None:
                names.append(backbone + " CausalLM")
    else:
        names = zoo_build.application_names()
    return names[i::n]


# --- one model ----------------------------------------------------------------------

def _flat_outputs(out) -> list:
    import tensorflow as tf

    return [t for t in tf.nest.flatten(out) if t is not None and t.dtype.is_floating]


def _step(model, x) -> dict[str, Any]:
    """One eager forward and backward pass: the outputs, the gradients of every
    trainable weight of the sum of the outputs weighted by fixed random numbers, the
    non-trainable variables after it (tests/patch_checks.py's `step`, for nested
    outputs)."""
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(1)
    with tf.GradientTape() as tape:
        outs = _flat_outputs(model(x, training=True))
        value = tf.add_n([tf.reduce_sum(tf.cast(o, tf.float32) * rng.normal(
            size=o.shape).astype("float32")) for o in outs])
    grads = tape.gradient(value, model.trainable_weights)
    result = {f"output {i}": np.asarray(o, np.float64) for i, o in enumerate(outs)}
    for i, g in enumerate(grads):
        if g is not None:
            result[f"grad {i}"] = np.asarray(tf.convert_to_tensor(g), np.float64)
    for i, v in enumerate(model.non_trainable_weights):
        if v.dtype.is_floating if hasattr(v.dtype, "is_floating") else "float" in str(v.dtype):
            result[f"state {i}"] = np.asarray(v.numpy(), np.float64)
    return result


def _errors(result: dict, reference: dict) -> dict[str, float]:
    import numpy as np

    kinds: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0])
    for key, a in result.items():
        b = reference.get(key)
        if b is None or b.shape != a.shape:
            continue
        d = kinds[key.split()[0]]
        d[0] += float(np.sum((a - b) ** 2))
        d[1] += float(np.sum(b * b))
    return {k: (d / max(n, 1e-300)) ** 0.5 for k, (d, n) in kinds.items()}


def _fit_step(model, x, start: list) -> dict[str, Any]:
    """One ``train_on_batch`` of a causal LM on next tokens (SGD): its loss, and how
    far each weight moved (the gradients through the step fit runs), from `start`."""
    import keras
    import numpy as np

    for v, a in zip(model.variables, start):
        v.assign(np.asarray(a).astype(v.dtype))
    # eager: the same train_step (the patched one under the patch), without a trace
    model.compile(optimizer=keras.optimizers.SGD(0.1),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  run_eagerly=True)
    # next tokens: of the decoder's input for an encoder-decoder LM
    tokens = np.asarray(x["token_ids"] if "token_ids" in x else x["decoder_token_ids"])
    loss = model.train_on_batch(x, np.roll(tokens, -1, axis=1))
    result = {"fitloss": np.asarray(loss, np.float64)}
    index = {id(v): i for i, v in enumerate(model.variables)}
    for i, v in enumerate(model.trainable_weights):
        before = np.asarray(start[index[id(v)]], np.float64)
        result[f"fitstep {i}"] = np.asarray(v.numpy(), np.float64) - before
    return result


def _close(stock: dict, patched: dict, rtol: float = 2e-5, atol: float = 2e-6) -> bool:
    """Each array of `patched` within `rtol` of stock's, plus `atol` times the largest
    magnitude of its kind (tests/patch_checks.py's `assert_close`)."""
    import numpy as np

    scale: dict[str, float] = collections.defaultdict(float)
    for key, a in stock.items():
        scale[key.split()[0]] = max(scale[key.split()[0]], float(np.max(np.abs(a), initial=0)))
    return all(np.allclose(patched[k], a, rtol=rtol, atol=atol * scale[k.split()[0]] + 1e-30)
               for k, a in stock.items())


def _where(error: Exception) -> str:
    """The class whose call raised `error` (Keras's message names it), else "its call"."""
    text = str(error)
    marker = "Exception encountered when calling "
    if marker in text:
        return text.split(marker, 1)[1].split("(", 1)[0].split(".call")[0]
    return "its call"


def _exactness(m) -> dict[str, Any]:
    """Patched and stock float32 against float64: per kind, the errors, and whether the
    patched step is within 3x stock's (+1e-6)."""
    import keras
    import numpy as np

    import tf_ops

    start = [v.numpy() for v in m.model.variables]
    stock = _step(m.model, m.x)
    for v, a in zip(m.model.variables, start):
        v.assign(a)
    with tf_ops.patch_keras():
        patched = _step(m.model, m.x)
    for v, a in zip(m.model.variables, start):
        v.assign(a)
    keras.config.set_dtype_policy("float64")
    try:
        twin = m.rebuild()
    finally:
        keras.config.set_dtype_policy("float32")
    if len(twin.variables) != len(start):
        return {"exact": None, "why": "the float64 twin has other variables"}
    for v, a in zip(twin.variables, start):
        v.assign(np.asarray(a).astype(v.dtype))
    x64 = keras.tree.map_structure(
        lambda a: a.astype("float64") if a.dtype == np.float32 else a, m.x)
    try:
        reference = _step(twin, x64)
    except Exception as error:  # noqa: BLE001  (the model's own code, not tf_ops's)
        # No float64 run: then patched against stock float32, to float32 rounding
        # (tests/patch_checks.py's assert_close bounds).
        return {"exact": _close(stock, patched), "stock": {}, "patched": {},
                "why": f"to stock float32: its own code does not run in float64 "
                       f"({type(error).__name__} in {_where(error)})"}
    e_stock = _errors(stock, reference)
    if e_stock.get("output", 0.0) > OTHER_FUNCTION:
        # Stock float32 is no rounding away from float64: the model's own code computes
        # something else in float64 (Gemma 3n's causal LM): patched against stock float32.
        return {"exact": _close(stock, patched), "stock": {}, "patched": {},
                "float64_output_error": e_stock["output"],
                "why": "to stock float32: its own code computes another function in "
                       "float64 (stock float32's outputs are not a rounding away from it)"}
    if m.name.endswith("CausalLM"):  # and through fit: the patched train step (its head)
        stock |= _fit_step(m.model, m.x, start)
        with tf_ops.patch_keras():
            patched |= _fit_step(m.model, m.x, start)
        reference |= _fit_step(twin, x64, [v.numpy() for v in twin.variables])
        for v, a in zip(m.model.variables, start):
            v.assign(a)
    e_stock, e_patched = _errors(stock, reference), _errors(patched, reference)
    result = {"exact": _within(e_patched, e_stock), "stock": e_stock, "patched": e_patched}
    if not result["exact"] and _gradients_alone(e_patched, e_stock):
        others = _other_inputs_exact(m, twin, start)
        if others is not None:
            result["kink"] = {"stock": e_stock["grad"], "patched": e_patched["grad"],
                              "others": others}
            result["exact"] = _exact_on_others(others)
    return result


def _within(patched: dict[str, float], stock: dict[str, float]) -> bool:
    """The exactness bound: each kind's error within 3x stock float32's (+1e-6)."""
    return all(e <= 3 * stock.get(k, 0.0) + 1e-6 for k, e in patched.items())


def _gradients_alone(patched: dict[str, float], stock: dict[str, float]) -> bool:
    """Whether every kind but the gradients is within the bound."""
    return _within({k: e for k, e in patched.items() if k != "grad"}, stock)


def _exact_on_others(others: list[tuple[dict, dict]]) -> bool:
    """The verdict of a model whose gradients alone were further than the bound on the
    first input, from (stock's, patched's) errors on the other inputs.

    That is the signature of a pre-activation a rounding away from a kink (ReLU's 0),
    which float32 puts on the other side: the gradient of everything upstream of it moves
    by a whole term, in stock's run or in the patched one, by chance (MobileNetV2: one
    ReLU6 input 7.7e-8 from 0). Either run may do so on any input, so one other input
    within the bound is enough, where a systematic error fails on every input; the
    outputs (and state) must be within it on every one."""
    return (any(_within(p, s) for s, p in others)
            and all(_gradients_alone(p, s) for s, p in others))


# Further inputs a gradient-only difference is checked on.
OTHER_INPUTS = 2


def _other_inputs_exact(m, twin, start: list) -> list[tuple[dict, dict]] | None:
    """Stock's and the patched run's errors against float64 on `OTHER_INPUTS` other
    inputs (uniform draws over the first's range), where every input is floating (an
    image or audio model; tokens and masks are not redrawn): None otherwise."""
    import keras
    import numpy as np

    import tf_ops

    leaves = keras.tree.flatten(m.x)
    if not leaves or not all(np.asarray(a).dtype.kind == "f" for a in leaves):
        return None
    found = []
    for seed in range(1, OTHER_INPUTS + 1):
        rng = np.random.default_rng(seed)
        x = keras.tree.map_structure(
            lambda a: rng.uniform(a.min(), a.max(), a.shape).astype(a.dtype), m.x)
        runs = []
        for patched in (False, True):
            for v, a in zip(m.model.variables, start):
                v.assign(a)
            with tf_ops.patch_keras() if patched else contextlib.nullcontext():
                runs.append(_step(m.model, x))
        for v, a in zip(twin.variables, start):
            v.assign(np.asarray(a).astype(v.dtype))
        reference = _step(twin, keras.tree.map_structure(
            lambda a: a.astype("float64"), x))
        found.append((_errors(runs[0], reference), _errors(runs[1], reference)))
    for v, a in zip(m.model.variables, start):
        v.assign(a)
    return found


def _graph_ops(m, patched: bool = True) -> collections.Counter:
    """The TfOps> ops of the traced forward and backward graph, under the patch (or
    not: whether the model traces at all)."""
    import contextlib

    import tensorflow as tf

    import tf_ops

    x = tf.nest.map_structure(tf.convert_to_tensor, m.x)

    @tf.function
    def run(x):
        with tf.GradientTape() as tape:
            outs = _flat_outputs(m.model(x, training=True))
            total = tf.add_n([tf.reduce_sum(tf.cast(o, tf.float32)) for o in outs])
        return tape.gradient(total, m.model.trainable_weights)

    with tf_ops.patch_keras() if patched else contextlib.nullcontext():
        graph = run.get_concrete_function(x).graph
    return collections.Counter(op.type for op in graph.get_operations()
                               if op.type.startswith("TfOps>"))


def _attention_layers(model) -> int:
    """Layers that compute attention themselves: a class named ...Attention with no
    sublayer of that kind."""
    count = 0
    for layer in model._flatten_layers(include_self=False, recursive=True):
        if "attention" in type(layer).__name__.lower() and not any(
                "attention" in type(s).__name__.lower()
                for s in layer._flatten_layers(include_self=False, recursive=True)):
            count += 1
    return count


def _attention(ops: collections.Counter, layers: int) -> str:
    if not layers:
        return "none"
    for op in ATTENTION_OPS[:2]:
        if ops[op]:
            return op
    if ops["TfOps>Softmax"]:
        return "TfOps>Softmax (scale and mask: Keras's)"
    return "Keras's own"


def check(name: str, source: str) -> dict[str, Any]:
    """Build one model and record its coverage row."""
    import tf_ops
    from tf_ops.bench import zoo_build

    record: dict[str, Any] = {"name": name, "source": source}
    started = time.perf_counter()
    try:
        m = (zoo_build.build_hub(name) if source == "keras-hub"
             else zoo_build.build_application(name))
    except zoo_build.LeftOut as why:
        return record | {"status": "left out", "why": str(why)}
    except Exception as error:  # noqa: BLE001  (reported, with its message)
        return record | {"status": "left out",
                         "why": f"does not build at the tiny size: {type(error).__name__}: "
                                f"{str(error).splitlines()[0][:160]}"}
    record["kind"] = m.kind
    try:
        with tf_ops.patch_keras():
            summary = tf_ops.patch_summary(m.model)
        record["fused"] = [[r.layers, r.kind, r.detail] for r in summary.fused]
        record["left"] = [[r.layers, r.kind, r.detail] for r in summary.left]
        record["no_op"] = [list(p) for p in summary.no_op]
        record["attention_layers"] = _attention_layers(m.model)
        try:
            ops = _graph_ops(m)
        except Exception as error:  # noqa: BLE001
            try:  # the model's own code may not trace (Stable Diffusion 3's scheduler)
                _graph_ops(m, patched=False)
            except Exception:  # noqa: BLE001
                ops = None
                record["attention"] = ("not traced: its own code does not run in a "
                                       f"tf.function ({type(error).__name__} in "
                                       f"{_where(error)}, stock Keras's too)")
            else:
                raise
        if ops is not None:
            record["ops"] = dict(sorted(ops.items()))
            record["attention"] = _attention(ops, record["attention_layers"])
        record |= _exactness(m)
        record["status"] = "checked"
    except Exception as error:  # noqa: BLE001
        record["status"] = "crashed"
        record["why"] = f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
        record["trace"] = traceback.format_exc()[-2000:]
    record["seconds"] = round(time.perf_counter() - started, 1)
    return record


def speed(name: str, source: str, budget: float = 20.0) -> dict[str, Any]:
    """Graph-mode train step (``train_on_batch``, Adam, zoo_build's "small" size: width
    256, 128 tokens, 128x128 images, batch 4): stock time over patched, the median of
    interleaved rounds, with its quartiles."""
    import keras
    import numpy as np

    import tf_ops
    from tf_ops.bench import machine, zoo_build
    from tf_ops.bench.timing import ratio_quartiles, time_interleaved

    build = zoo_build.build_hub if source == "keras-hub" else zoo_build.build_application
    stock, patched = build(name, "small"), build(name, "small")
    for a, b in zip(patched.model.variables, stock.model.variables):
        a.assign(b)
    out = stock.model(stock.x)
    ys = keras.tree.map_structure(lambda o: np.zeros(o.shape, "float32"), out)
    calls = {}
    for label, m in (("stock", stock), ("patched", patched)):
        causal = name.endswith("CausalLM")
        if causal:
            y = np.asarray(m.x["token_ids"])
            m.model.compile(optimizer=keras.optimizers.Adam(1e-4),
                            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        else:
            y = ys
            m.model.compile(optimizer=keras.optimizers.Adam(1e-4), loss="mse")
        calls[label] = (lambda m=m, y=y: (m.model.train_on_batch(m.x, y), ())[1])
    plain = calls["patched"]

    def under_patch():
        with tf_ops.patch_keras():
            return plain()
    calls["patched"] = under_patch
    timings = time_interleaved(calls, 5, 41, budget)
    low, mid, high = ratio_quartiles(timings["stock"], timings["patched"])
    return {"name": name, "speedup": round(mid, 3), "low": round(low, 3),
            "high": round(high, 3), "stock_ms": round(timings["stock"].median * 1e3, 2),
            "patched_ms": round(timings["patched"].median * 1e3, 2),
            "rounds": len(timings["stock"].samples), "machine": machine.describe()}


def run_group(group: str) -> list[dict]:
    source = "keras-hub" if group.startswith("hub") else "keras.applications"
    rows = []
    for name in names_of(group):
        row = check(name, source)
        print(f"{row['status']:<9} {name} ({row.get('seconds', 0)} s) "
              f"{row.get('why', '')}", file=sys.stderr, flush=True)
        rows.append(row)
    return rows


def measure_speed(rows: list[dict]) -> None:
    """Adds the train-step speed-up to the `SPEED` rows that were checked: one model at
    a time, in this process, after the groups (timed beside another group's process,
    a row measured that process's load as much as the model)."""
    for row in rows:
        if row["name"] in SPEED and row["status"] == "checked":
            row["speed"] = speed(row["name"], row["source"])
            print(f"speed     {row['name']}: {row['speed']['speedup']}x", file=sys.stderr,
                  flush=True)


def run_all(jobs: int, out_dir: Path, reuse: bool = False) -> list[dict]:
    """Every group, each in a subprocess, `jobs` at a time (`reuse`: a group whose rows
    `out_dir` holds already is not run again)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))

    def one(group: str) -> list[dict]:
        path = out_dir / (group.replace(":", "_").replace("/", "of") + ".json")
        if reuse and path.exists():
            return json.loads(path.read_text())
        command = [sys.executable, "-m", "tf_ops.bench.coverage", "--group", group,
                   "--json", str(path)]
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"group {group} failed:\n{done.stderr[-4000:]}")
        return json.loads(path.read_text())

    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        return [row for rows in pool.map(one, groups()) for row in rows]


# --- the table ------------------------------------------------------------------------

def _fused_rows(row: dict) -> list:
    """patch_summary's fused rows, and the layers whose one computation tf_ops has an op
    for runs it though the summary lists the layer as left (`ACTIVATION_ALONE`)."""
    return row["fused"] + [[name, f"{kind} (its activation alone)", detail]
                           for name, kind, detail in row["left"] if detail == ACTIVATION_ALONE]


def _left_text(row: dict) -> str:
    reasons = collections.Counter(f"{kind}: {detail}" for _, kind, detail in _counted_left(row))
    return "; ".join(f"{r} (x{n})" if n > 1 else r for r, n in sorted(reasons.items()))


def _fused_text(row: dict) -> str:
    kinds = collections.Counter(kind for _, kind, _ in _fused_rows(row))
    return ", ".join(f"{k} x{n}" for k, n in sorted(kinds.items()))


# Left rows that compute nothing a tf_ops op is for (a Dense with no activation: its
# bias is TensorFlow's BiasAdd already; an EinsumDense with no bias): listed, not counted.
NOTHING_TO_FUSE = ("no activation to fuse with the bias", "no bias",
                   "a bias of one axis (Keras's add runs it as BiasAdd already)",
                   "tf_ops has no kernel for activation 'linear'")
# Left rows the patch leaves by choice, measured (keras_backend.LEFT_TO_TENSORFLOW).
BY_CHOICE = "TensorFlow's Relu"
# A Dense with no bias: its matmul is Keras's, its activation (what tf_ops has an op for
# in it) runs tf_ops's kernel (a ReLU's is BY_CHOICE instead): counted as fused.
ACTIVATION_ALONE = "no bias (the activation alone runs tf_ops's kernel)"


def _counted_left(row: dict) -> list:
    return [r for r in row["left"] if r[2] not in NOTHING_TO_FUSE and r[2] != ACTIVATION_ALONE]


def counts(rows: list[dict]) -> dict[str, int]:
    """The layers of checked models that compute something tf_ops has an op for
    (norms, attention, rotary, activations, bias + activation, heads): fused and left
    (`NOTHING_TO_FUSE` aside; a Dense with no bias whose activation runs tf_ops's kernel,
    `ACTIVATION_ALONE`, is fused). An attention layer counts as fused where the graph
    runs a tf_ops softmax or attention op."""
    fused = left = by_choice = 0
    for row in rows:
        if row["status"] != "checked":
            continue
        fused += len(_fused_rows(row))
        left += len(_counted_left(row))
        by_choice += sum(r[2].startswith(BY_CHOICE) for r in _counted_left(row))
        attention = row["attention_layers"]
        if row["attention"].startswith("TfOps>"):
            fused += attention
        else:
            left += attention
    return {"fused": fused, "left": left, "by_choice": by_choice}


def table_rows(rows: list[dict]) -> list[tuple[str, ...]]:
    """The doc's table, without the measured numbers: what the test compares."""
    out = []
    for row in rows:
        if row["status"] != "checked":
            out.append((row["name"], row["source"], row["status"], row.get("why", ""),
                        "", "", ""))
            continue
        exact = {True: "yes", False: "NO", None: "not compared"}[row["exact"]]
        if row.get("why"):
            exact += f" ({row['why']})"
        if row["name"] in NOTES:  # whatever this run gave: rounding differs by machine
            exact = f"see the note: {NOTES[row['name']]}"
        out.append((row["name"], row["kind"], exact, _fused_text(row) or "none",
                    _left_text(row) or "none", row["attention"],
                    ", ".join(f"{k} x{n}" for k, n in row["no_op"]) or "none"))
    return out


HEADER = ("model", "kind", "exact", "runs fused (layers by class)",
          "left to Keras, and why", "attention", "no tf_ops op (by class)")


def markdown(rows: list[dict], seconds: float | None = None) -> str:
    import keras
    import keras_hub
    import tensorflow as tf

    c = counts(rows)
    total = c["fused"] + c["left"]
    checked = [r for r in rows if r["status"] == "checked"]
    lines = [
        "# The model zoo under `tf_ops.patch_keras()`",
        "",
        "Generated by `python -m tf_ops.bench.coverage` (tf_ops/bench/coverage.py); "
        "tests/keras/test_coverage.py keeps it true. Do not edit by hand.",
        "",
        f"keras-hub {keras_hub.__version__}, Keras {keras.__version__}, "
        f"TensorFlow {tf.__version__}. Every keras-hub backbone in `keras_hub.models` "
        "(and the causal LM on it, where keras-hub has one) and every "
        "`keras.applications` model, at a tiny size (2 layers, width 16, 8 tokens, "
        "32x32 images) with random weights.",
        "",
        f"- models: {len(rows)}; checked: {len(checked)}; exact: "
        f"{sum(r['exact'] is True for r in checked)}; crashed: "
        f"{sum(r['status'] == 'crashed' for r in rows)}; left out (not built, with why): "
        f"{sum(r['status'] == 'left out' for r in rows)}.",
        f"- layers that compute something tf_ops has an op for: {total}; run fused: "
        f"{c['fused']} ({100.0 * c['fused'] / max(total, 1):.1f}%); of them {c['by_choice']} "
        f"are ReLUs the patch leaves to TensorFlow's Relu by choice (one kernel each way "
        f"already, measured): without those, {c['fused']} of {total - c['by_choice']} "
        f"({100.0 * c['fused'] / max(total - c['by_choice'], 1):.1f}%).",
        "- exact: the patched float32 forward and backward is no further from the "
        "float64 run than stock Keras's float32 is (3x, +1e-6). Where the gradients alone "
        "are further, an image model is checked on two other inputs, and is exact if one "
        "is within: a pre-activation a rounding away from a kink (ReLU's 0) lands on "
        "either side in either float32 run, and moves every weight's gradient upstream "
        "of it (MobileNetV2's note).",
        "- runs fused / left: `tf_ops.patch_summary`'s rows, by class (a pair such as "
        "`Conv2D + BatchNormalization` is one row); a Dense with no activation and an "
        "EinsumDense with no bias compute nothing a tf_ops op is for, and are not "
        "listed; a Dense with an activation and no bias runs its activation alone with "
        "tf_ops's kernel (its matmul is TensorFlow's, as every Dense's): `Dense (its activation "
        "alone)`, fused (a ReLU's is TensorFlow's Relu, by choice, as an Activation's); "
        "layers of kinds tf_ops has no op for (embeddings, convolutions, dropout, ...) are "
        "in the last column.",
        "- attention: the op the traced graph runs for it (`TfOps>Attention`: flash "
        "attention, no [batch, heads, T, S] tensor; `TfOps>ScaledMaskedSoftmax`: scale, "
        "mask and softmax in one op, where the layer computes the weights itself (attention "
        "dropout, a bias of its own such as ALiBi or T5's); `Keras's own`: a keras-hub "
        "attention that computes its softmax its own way; `not traced`: the model's own "
        "code does not run in a `tf.function`, stock Keras's neither, so no graph says: "
        "its attention layers are counted as left).",
        "- composites (CLIP, SAM, BLIP-2, DeepLab, ...) are built from their sub-models "
        "(encoders, decoders), each built tiny first, as its own row is where it has one.",
        "",
    ]
    speeds = [r["speed"] for r in rows if "speed" in r]
    if speeds:
        lines += ["## Train step speed-up (graph mode, small size, this machine)", "",
                  "Stock time over patched, `train_on_batch` with Adam, the median of "
                  "interleaved rounds (quartiles in brackets); width 256, 2 layers, 4 x 128 "
                  "tokens (vocabulary 8192), 4 x 128x128 images. `--speed` measures it, "
                  "one model at a time.", "",
                  f"Measured on: {speeds[0].get('machine', 'not recorded')}.", "",
                  "| model | stock ms | patched ms | speed-up (quartiles) |",
                  "|---|---|---|---|"]
        for s in speeds:
            lines.append(f"| {s['name']} | {s['stock_ms']} | {s['patched_ms']} | "
                         f"{s['speedup']:.2f}x ({s['low']:.2f}-{s['high']:.2f}, "
                         f"{s['rounds']} rounds) |")
        lines.append("")
    lines += ["## Every model", "", "| " + " | ".join(HEADER) + " |",
              "|" + "---|" * len(HEADER)]
    for cells in sorted(table_rows(rows)):
        lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    lines.append("")
    return "\n".join(lines)


def parse_speed(text: str) -> dict[str, dict[str, Any]]:
    """The speed-up rows of a docs/models.md, by model (what `markdown` writes of each
    row's "speed"): kept when the table is regenerated without ``--speed``."""
    import re

    if "## Train step speed-up" not in text:
        return {}
    part = text.split("## Train step speed-up", 1)[1].split("\n## ", 1)[0]
    on = re.search(r"^Measured on: (.+)\.$", part, re.MULTILINE)
    found = {}
    for line in part.splitlines():
        m = re.fullmatch(r"\| (.+?) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+)x \(([\d.]+)-([\d.]+), "
                         r"(\d+) rounds\) \|", line.strip())
        if m:
            name, stock, patched, mid, low, high, rounds = m.groups()
            found[name] = {"name": name, "speedup": float(mid), "low": float(low),
                           "high": float(high), "stock_ms": float(stock),
                           "patched_ms": float(patched), "rounds": int(rounds)}
            if on:
                found[name]["machine"] = on.group(1)
    return found


def parse_table(text: str) -> list[tuple[str, ...]]:
    """The rows of the "Every model" table of docs/models.md."""
    part = text.split("## Every model", 1)[1]
    rows = [line for line in part.splitlines() if line.startswith("| ")][1:]
    return [tuple(c.strip() for c in line.strip("|").split(" | ")) for line in rows]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--group", help="one group (hub:i/n, apps:i/n), in this process")
    parser.add_argument("--json", help="where --group writes its rows")
    parser.add_argument("--speed", action="store_true",
                        help="time the train step of the representative models, one at a "
                             "time after the groups (without it, the speed rows of the "
                             "--out file there now are kept; with --reuse, only they run)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", default=str(DOC))
    parser.add_argument("--reuse", action="store_true",
                        help="keep the groups' rows of the last run (build-tests/coverage/)")
    args = parser.parse_args(argv)
    if args.group:
        rows = run_group(args.group)
        Path(args.json).write_text(json.dumps(rows, indent=1, default=str))
        return 0
    started = time.perf_counter()
    rows = run_all(args.jobs, ROOT / "build-tests" / "coverage", args.reuse)
    out = Path(args.out)
    if args.speed:
        measure_speed(rows)
    elif out.exists():  # the last --speed run's rows, not measured again
        kept = parse_speed(out.read_text())
        for row in rows:
            if row["name"] in kept and row["status"] == "checked":
                row["speed"] = kept[row["name"]]
    out.write_text(markdown(rows))
    print(f"wrote {args.out} ({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
