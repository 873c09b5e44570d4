"""The model benchmark: stock Keras against the same model under `tf_ops.patch_keras()`.

  python -m tf_ops.bench.models [--models EfficientNetB0,GPT-2] [--quick]
      [--modes graph,jit] [--steps train,predict] [--budget SECONDS]
      [--only FAMILY,...] [--out DIR] [--profile] [--size bench|test] [--docs]
  python -m tf_ops.bench.models --from-json RUN.json,... [--out DIR] [--docs]

For each model of `model_zoo` (keras.applications EfficientNetB0, MobileNetV3Small,
ResNet50, ConvNeXtTiny; keras-hub GPT-2, BERT, VAE, LLaMA: random weights, the sizes in
model_zoo.py; keras-hub's are skipped with a message where it is not installed), two
copies with the same weights are compiled with Adam, one stock and one built and traced
under the patch, and timed in interleaved rounds (timing.py: each round runs both, in
alternating order, so a slow moment of a shared machine falls on both):

- train step (``train_on_batch``) and predict step (``predict_on_batch``),
- in graph mode (``jit_compile=False``: Keras's default on a CPU) and under
  ``jit_compile=True`` (Keras's default where a GPU is present).

Reported per row: the median of the per-round ratios stock time / patched time (> 1:
patched is faster) with their interquartile range, the median step times, and the peak
memory of a step: the allocator's peak during the step above what was in use before it
(the largest of three steps), plus the model's own variables and optimizer slots (what a
process training only that model holds), stock and patched. The CPU allocator keeps
those statistics only as TF's BFC allocator, so the command re-runs itself with
``TF_CPU_ALLOCATOR_USE_BFC=true``.

Written to ``--out`` (default build/bench-models): ``models.md`` (the table),
``models.png`` (the ratios, with the issue's targets), ``models.json``. ``--profile``
adds, for each train step below its target, where the patched step's time goes
(op_profile.py). ``--only`` patches some families only (e.g. ``--only norm``: the
normalisations' gain alone). ``--from-json`` rebuilds the table and chart from the JSON
of earlier runs (later files' rows replace earlier ones of the same model, step and
mode) without measuring; ``--docs`` also puts the table in README.md (between its
``<!-- models-table -->`` markers) and the chart in docs/models.png.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

_BFC = "TF_CPU_ALLOCATOR_USE_BFC"
REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = "build/bench-models"


@dataclasses.dataclass
class Row:
    model: str
    step: str  # "train" | "predict"
    mode: str  # "graph" | "jit"
    ratio: float  # median of per-round stock / patched
    low: float  # first quartile of the ratios
    high: float  # third quartile
    rounds: int
    stock_ms: float
    patched_ms: float
    stock_mib: float | None = None
    patched_mib: float | None = None
    target: float | None = None  # the speed target (graph-mode train step)
    memory_target: float | None = None

    @property
    def memory_ratio(self) -> float | None:
        if not self.stock_mib or self.patched_mib is None:
            return None
        return self.patched_mib / self.stock_mib

    def met(self) -> bool | None:
        if self.target is None:
            return None
        ok = self.ratio >= self.target
        if self.memory_target is not None and self.memory_ratio is not None:
            ok = ok and self.memory_ratio <= self.memory_target
        return ok


def _parse(argv):
    from tf_ops.bench import model_zoo

    p = argparse.ArgumentParser(prog="python -m tf_ops.bench.models", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", help=f"comma-separated, of {', '.join(model_zoo.CASES)}")
    p.add_argument("--modes", default="graph,jit", help="graph,jit (default both)")
    p.add_argument("--steps", default="train,predict", help="train,predict (default both)")
    p.add_argument("--budget", type=float, default=None,
                   help="seconds of timed rounds per row (default 60, --quick 8)")
    p.add_argument("--quick", action="store_true",
                   help="few rounds per row (3-5): a smoke run, not a measurement")
    p.add_argument("--only", help="patch these families only (default all)")
    p.add_argument("--out", default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})")
    p.add_argument("--profile", action="store_true",
                   help="where the patched train step's time goes, for each miss")
    p.add_argument("--no-memory", action="store_true", help="skip the memory measurement")
    p.add_argument("--size", choices=model_zoo.SIZES, default="bench",
                   help="the models' size: bench (default), or test (tiny: a smoke run)")
    p.add_argument("--from-json", help="comma-separated models.json files: no measuring")
    p.add_argument("--docs", action="store_true",
                   help="also write the table into README.md and the chart to docs/models.png")
    args = p.parse_args(argv)
    names = [n.strip() for n in (args.models or ",".join(model_zoo.CASES)).split(",") if n.strip()]
    unknown = sorted(set(names) - set(model_zoo.CASES))
    if unknown:
        p.error(f"unknown models {unknown}; the models are {', '.join(model_zoo.CASES)}")
    args.models = names
    args.modes = [m for m in args.modes.split(",") if m]
    args.steps = [s for s in args.steps.split(",") if s]
    if set(args.modes) - {"graph", "jit"} or set(args.steps) - {"train", "predict"}:
        p.error("--modes takes graph,jit and --steps train,predict")
    args.only = tuple(f for f in (args.only or "").split(",") if f) or None
    if args.budget is None:
        args.budget = 8.0 if args.quick else 60.0
    return args


def _bytes_of(variables) -> int:
    return sum(int(v.numpy().nbytes) for v in variables)


# Calls whose peaks _step_peak_mib takes the largest of: the order in which the executor's
# threads run a step's ops moves its peak (LLaMA's stock train step: 1239 and 1360 MiB in
# two runs), and the largest is what a step needs.
_PEAK_CALLS = 3


def _step_peak_mib(fn, resident: int) -> float:
    """Peak allocator memory of a call of `fn` above what was in use before it, the
    largest over `_PEAK_CALLS` calls, plus `resident` bytes, in MiB."""
    import tensorflow as tf

    try:
        tf.config.experimental.get_memory_info("CPU:0")
    except ValueError as error:  # TensorFlow's default CPU allocator keeps no statistics
        raise RuntimeError(
            "peak memory needs TensorFlow's oneDNN allocator, which TensorFlow turns on "
            "only on some CPUs: run with TF_ENABLE_ONEDNN_OPTS=1 (make bench-models sets "
            "it) or --no-memory") from error
    peaks = []
    for _ in range(_PEAK_CALLS):
        before = tf.config.experimental.get_memory_info("CPU:0")["current"]
        tf.config.experimental.reset_memory_stats("CPU:0")
        fn()
        peaks.append(tf.config.experimental.get_memory_info("CPU:0")["peak"] - before)
    return (max(max(peaks), 0) + resident) / 2**20


def bench_model(name: str, args, out=print) -> list[Row]:
    """Every (step, mode) row of one model."""
    import keras

    import tf_ops
    from tf_ops.bench import model_zoo
    from tf_ops.bench.timing import ratio_quartiles, time_interleaved

    case = model_zoo.CASES[name]
    rows: list[Row] = []
    stock, patched = model_zoo.twins(name, args.size)
    x, y = stock.x, stock.y
    min_reps, max_reps = (3, 5) if args.quick else (7, 41)

    def under_patch(fn):
        def run():
            with tf_ops.patch_keras(only=args.only):
                return fn()
        return run

    def synced(fn):  # train_on_batch / predict_on_batch return when the step is done
        def run():
            fn()
            return ()
        return run

    for mode in args.modes:
        for built in (stock, patched):
            built.model.compile(optimizer=keras.optimizers.Adam(1e-4), loss=built.loss,
                                jit_compile=mode == "jit")
        for step in args.steps:
            if step == "train":
                calls = {"stock": lambda: stock.model.train_on_batch(x, y),
                         "patched": under_patch(lambda: patched.model.train_on_batch(x, y))}
            else:
                calls = {"stock": lambda: stock.model.predict_on_batch(x),
                         "patched": under_patch(lambda: patched.model.predict_on_batch(x))}
            calls = {label: synced(fn) for label, fn in calls.items()}
            started = time.perf_counter()
            timings = time_interleaved(calls, min_reps, max_reps, args.budget)
            low, mid, high = ratio_quartiles(timings["stock"], timings["patched"])
            row = Row(name, step, mode, mid, low, high, len(timings["stock"].samples),
                      timings["stock"].median * 1e3, timings["patched"].median * 1e3)
            if step == "train" and mode == "graph" and args.size == "bench":
                row.target, row.memory_target = case.target, case.memory_target
            if not args.no_memory:
                state = {"stock": stock, "patched": patched}
                for label, fn in calls.items():
                    model = state[label].model
                    resident = _bytes_of(model.variables)
                    if step == "train":
                        resident += _bytes_of(model.optimizer.variables)
                    setattr(row, f"{label}_mib", _step_peak_mib(fn, resident))
            rows.append(row)
            out(format_row(row) + f"   ({time.perf_counter() - started:.0f} s)")
            if args.profile and row.met() is False:
                from tf_ops.bench.op_profile import op_time

                out(f"  where the patched {step} step's time goes ({mode}), per step:")
                out(op_time(calls["patched"]).table())
                out("  and the stock step's:")
                out(op_time(calls["stock"]).table())
    return rows


def format_row(r: Row) -> str:
    memory = ""
    if r.memory_ratio is not None:
        memory = f"  memory {r.stock_mib:7.0f} -> {r.patched_mib:7.0f} MiB ({r.memory_ratio:4.0%})"
    target = "" if r.target is None else f"  target {r.target:.2f}x: {'met' if r.met() else 'MISSED'}"
    return (f"{r.model:<17} {r.step:<7} {r.mode:<5} {r.ratio:5.2f}x "
            f"[{r.low:4.2f}-{r.high:4.2f}] over {r.rounds:2d} rounds  "
            f"{r.stock_ms:8.1f} -> {r.patched_ms:8.1f} ms{memory}{target}")


def markdown(rows: list[Row], machine: dict) -> str:
    lines = [
        f"Stock Keras / `tf_ops.patch_keras()` step time (median of interleaved rounds; "
        f"> 1: patched is faster), {machine['cpu']}, {machine['cores']} cores, TensorFlow "
        f"{machine['tensorflow']}, Keras {machine['keras']}:",
        "",
        "| model | step | mode | speed-up | IQR | stock ms | patched ms | peak MiB stock → patched | target |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        memory = "" if r.memory_ratio is None else (
            f"{r.stock_mib:.0f} → {r.patched_mib:.0f} ({r.memory_ratio:.0%})")
        target = ""
        if r.target is not None:
            target = f"≥ {r.target:.2f}×" + (f", ≤ {r.memory_target:.0%} memory"
                                             if r.memory_target else "")
            target += " ✓" if r.met() else " ✗"
        lines.append(f"| {r.model} | {r.step} | {r.mode} | **{r.ratio:.2f}×** | "
                     f"{r.low:.2f}–{r.high:.2f} | {r.stock_ms:.1f} | {r.patched_ms:.1f} | "
                     f"{memory} | {target} |")
    return "\n".join(lines) + "\n"


def plot(rows: list[Row], path: Path) -> None:
    """Grouped bars: per model, the four (step, mode) ratios with their IQR; the target
    of the graph-mode train step as a tick."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(dict.fromkeys(r.model for r in rows))
    series = list(dict.fromkeys((r.step, r.mode) for r in rows))
    width = 0.8 / max(len(series), 1)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.5 * len(models)), 4.2))
    colors = {("train", "graph"): "tab:blue", ("predict", "graph"): "tab:cyan",
              ("train", "jit"): "tab:orange", ("predict", "jit"): "tab:olive"}
    for i, key in enumerate(series):
        xs, ys, errs = [], [], [[], []]
        for j, model in enumerate(models):
            r = next((r for r in rows if r.model == model and (r.step, r.mode) == key), None)
            if r is None:
                continue
            xs.append(j + (i - (len(series) - 1) / 2) * width)
            ys.append(r.ratio)
            errs[0].append(r.ratio - r.low)
            errs[1].append(r.high - r.ratio)
        ax.bar(xs, ys, width, yerr=errs, capsize=2, label=f"{key[0]}, {key[1]}",
               color=colors.get(key))
    for j, model in enumerate(models):
        r = next((r for r in rows if r.model == model and r.target), None)
        if r is not None:
            ax.plot([j - 0.45, j + 0.45], [r.target] * 2, color="black", linewidth=1.5,
                    label="target (train, graph)" if j == 0 else None)
    ax.axhline(1.0, color="gray", linewidth=0.8, linestyle="--")
    ax.set_xticks(range(len(models)), models, fontsize=8)
    ax.set_ylabel("stock time / patched time")
    ax.set_title("tf_ops.patch_keras(): speed-up per step (CPU)")
    ax.legend(fontsize=7, ncol=3)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def load_rows(paths: list[str]) -> tuple[list[Row], dict]:
    """The rows of earlier runs' models.json files, a later file's row replacing an
    earlier one of the same model, step and mode; the last file's machine."""
    by_key: dict[tuple, Row] = {}
    machine: dict = {}
    for path in paths:
        data = json.loads(Path(path).read_text())
        machine = data["machine"]
        for d in data["rows"]:
            d = {k: v for k, v in d.items() if k != "memory_ratio"}
            by_key[(d["model"], d["step"], d["mode"])] = Row(**d)
    return list(by_key.values()), machine


TABLE_START, TABLE_END = "<!-- models-table -->", "<!-- /models-table -->"


def splice_table(readme: str, table: str,
                 markers: tuple[str, str] = (TABLE_START, TABLE_END)) -> str:
    """`readme` with what lies between its table markers (the model table's unless
    given) replaced by `table`."""
    (first, last) = markers
    start, end = readme.find(first), readme.find(last)
    if start < 0 or end < start:
        raise ValueError(f"README.md has no {first} ... {last} markers")
    return readme[:start + len(first)] + "\n" + table + readme[end:]


def write_docs(rows: list[Row], machine: dict, chart: Path, root: Path) -> None:
    """The table into README.md, the chart to docs/models.png."""
    readme = root / "README.md"
    readme.write_text(splice_table(readme.read_text(), markdown(rows, machine)))
    (root / "docs" / "models.png").write_bytes(chart.read_bytes())


def _machine() -> dict:
    import keras
    import tensorflow as tf

    from tf_ops.bench.machine import cpu_name

    return {"cpu": cpu_name(), "cores": os.cpu_count(), "tensorflow": tf.__version__,
            "keras": keras.__version__, "load_average": os.getloadavg()[0]}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if os.environ.get(_BFC) != "true":  # the allocator statistics need TF's BFC allocator
        os.environ[_BFC] = "true"
        os.execv(sys.executable, [sys.executable, "-m", "tf_ops.bench.models", *argv])
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    args = _parse(argv)
    from tf_ops.bench import model_zoo

    machine = _machine()
    print(f"{machine['cpu']}, {machine['cores']} cores, load average "
          f"{machine['load_average']:.1f}; TensorFlow {machine['tensorflow']}, Keras "
          f"{machine['keras']}; patched families: {', '.join(args.only or ['all'])}")
    if args.from_json:
        rows, machine = load_rows(args.from_json.split(","))
        order = {name: i for i, name in enumerate(model_zoo.CASES)}
        rows.sort(key=lambda r: (order.get(r.model, len(order)), r.step != "train",
                                 r.mode != "graph"))
    else:
        rows = []
        for name in args.models:
            if model_zoo.CASES[name].keras_hub and not model_zoo.keras_hub_available():
                print(f"{name}: skipped, keras-hub is not installed (pip install keras-hub)")
                continue
            rows += bench_model(name, args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "models.md").write_text(markdown(rows, machine))
    (out / "models.json").write_text(json.dumps(
        {"machine": machine, "families": args.only,
         "rows": [{**dataclasses.asdict(r), "memory_ratio": r.memory_ratio} for r in rows]},
        indent=1))
    if rows:
        plot(rows, out / "models.png")
    print(f"\n{markdown(rows, machine)}\nwritten: {out / 'models.md'}, {out / 'models.png'}, "
          f"{out / 'models.json'}")
    if args.docs and rows:
        write_docs(rows, machine, out / "models.png", Path(REPO_ROOT))
        print("written: README.md's table, docs/models.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
