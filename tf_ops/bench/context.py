"""The longest context a train step fits in a memory budget, stock Keras and patched.

  python -m tf_ops.bench.context [--models "LLaMA 2k,GPT-2 2k"] [--budget-gib 4]
      [--resolution 512] [--longest 65536] [--out DIR] [--docs]

For each long-context model of `model_zoo` (keras-hub LLaMA and GPT-2, one sequence,
2 layers, hidden 256, 8 query heads: the sizes of the model benchmark's "2k" rows, at
other lengths), one graph-mode train step (Adam, as tf_ops.bench.models compiles them)
is run at growing sequence lengths, stock and under `tf_ops.patch_keras()`: the length
doubles from 1024 while the step's peak memory (models.py's measure: the allocator's
peak above what was in use, plus the variables and optimizer slots) is within the budget,
then the first length over it is bisected to `--resolution` tokens. The answer is the
longest length measured within the budget (a lower bound within the resolution); a step
that fails to run at all (the process is out of memory) counts as over.

Each length is a fresh model in a fresh subprocess, so that nothing one length leaves in
the allocator moves the next one's peak. Written to ``--out`` (default
build/bench-context): ``context.md`` (the table), ``context.json``; ``--docs`` also puts
the table in README.md between its ``<!-- context-table -->`` markers.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = "build/bench-context"
MARKERS = ("<!-- context-table -->", "<!-- /context-table -->")


def _parse(argv):
    from tf_ops.bench import model_zoo

    long_context = [n for n, c in model_zoo.CASES.items() if c.long_context]
    p = argparse.ArgumentParser(prog="python -m tf_ops.bench.context", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default=",".join(long_context),
                   help=f"comma-separated, of {', '.join(long_context)} (default all)")
    p.add_argument("--budget-gib", type=float, default=4.0, help="memory budget (default 4)")
    p.add_argument("--resolution", type=int, default=512,
                   help="tokens the bisection stops at (default 512)")
    p.add_argument("--longest", type=int, default=65536,
                   help="the longest length tried (default 65536)")
    p.add_argument("--out", default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})")
    p.add_argument("--docs", action="store_true", help="also write the table into README.md")
    p.add_argument("--probe", nargs=3, metavar=("MODEL", "SEQ", "PATCHED"),
                   help=argparse.SUPPRESS)  # one step in this process (the subprocess)
    args = p.parse_args(argv)
    args.models = [n.strip() for n in args.models.split(",") if n.strip()]
    unknown = sorted(set(args.models) - set(long_context))
    if unknown:
        p.error(f"unknown models {unknown}; the long-context models are {long_context}")
    if args.resolution < 1 or args.longest < 1024 or args.budget_gib <= 0:
        p.error("--resolution >= 1, --longest >= 1024 and --budget-gib > 0, please")
    return args


def _probe(name: str, seq: int, patched: bool) -> dict:
    """One train step of `name` at `seq` tokens in this process: its peak MiB and time."""
    import keras

    import tf_ops
    from tf_ops.bench import model_zoo
    from tf_ops.bench.models import _bytes_of, _step_peak_mib

    built = model_zoo.CASES[name].build("bench", seq=seq)
    built.model.compile(optimizer=keras.optimizers.Adam(1e-4), loss=built.loss,
                        jit_compile=False)

    def step():
        if patched:
            with tf_ops.patch_keras():
                built.model.train_on_batch(built.x, built.y)
        else:
            built.model.train_on_batch(built.x, built.y)

    started = time.perf_counter()
    step()  # traces and builds the optimizer's slots
    first_s = time.perf_counter() - started
    resident = _bytes_of(built.model.variables) + _bytes_of(built.model.optimizer.variables)
    started = time.perf_counter()
    mib = _step_peak_mib(step, resident)
    return {"mib": mib, "step_s": (time.perf_counter() - started) / 3, "first_s": first_s}


def _measure(name: str, seq: int, patched: bool) -> float | None:
    """Peak MiB of the step at `seq` in a fresh process; None where it could not run."""
    env = dict(os.environ, TF_CPU_ALLOCATOR_USE_BFC="true", TF_CPP_MIN_LOG_LEVEL="3")
    cmd = [sys.executable, "-m", "tf_ops.bench.context", "--probe", name, str(seq),
           str(int(patched))]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO_ROOT)
    lines = [l for l in done.stdout.splitlines() if l.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        print(f"  {name} {'patched' if patched else 'stock'} T={seq}: did not run ({tail})")
        return None
    result = json.loads(lines[-1])
    print(f"  {name} {'patched' if patched else 'stock'} T={seq}: {result['mib']:.0f} MiB, "
          f"step {result['step_s']:.1f} s")
    return result["mib"]


def longest(name: str, patched: bool, budget_mib: float, resolution: int,
            top: int) -> dict:
    """The longest length within the budget (doubling, then bisection), with every
    length measured."""
    measured: dict[int, float | None] = {}

    def fits(seq: int) -> bool:
        measured[seq] = _measure(name, seq, patched)
        return measured[seq] is not None and measured[seq] <= budget_mib

    low, high = 0, None  # low fits (0: nothing yet), high does not
    seq = 1024
    while seq <= top:
        if not fits(seq):
            high = seq
            break
        low, seq = seq, seq * 2
    if high is not None:
        while high - low > resolution:
            mid = (low + high) // 2 // 128 * 128  # lengths in whole 128-token tiles
            if mid <= low:
                break
            if fits(mid):
                low = mid
            else:
                high = mid
    return {"model": name, "patched": patched, "longest": low, "first_over": high,
            "capped": high is None, "measured": {str(k): v for k, v in sorted(measured.items())}}


def markdown(results: list[dict], budget_gib: float, machine: str) -> str:
    by_model: dict[str, dict[bool, dict]] = {}
    for r in results:
        by_model.setdefault(r["model"], {})[r["patched"]] = r

    def cell(r: dict | None) -> str:
        if r is None:
            return "—"
        if r["capped"]:
            return f"≥ {r['longest']:,}"
        return f"{r['longest']:,}"

    lines = [f"Longest context whose graph-mode train step fits in {budget_gib:g} GiB (peak "
             f"allocator memory, `python -m tf_ops.bench.context`; {machine}):", "",
             "| model | stock Keras | patched | ratio |", "|---|---|---|---|"]
    for model, pair in by_model.items():
        s, p = pair.get(False), pair.get(True)
        ratio = (f"{'≥ ' if p['capped'] else ''}{p['longest'] / s['longest']:.1f}×"
                 if s and p and s["longest"] else "—")  # a capped search: at least
        lines.append(f"| {model.replace(' 2k', '')} | {cell(s)} | {cell(p)} | {ratio} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.probe:
        name, seq, patched = args.probe
        print(json.dumps(_probe(name, int(seq), patched == "1")))
        return 0
    from tf_ops.bench.machine import cpu_name
    from tf_ops.bench.models import splice_table

    machine = f"{os.cpu_count()} cores, {cpu_name()}"
    budget_mib = args.budget_gib * 1024
    results = []
    for name in args.models:
        for patched in (False, True):
            print(f"{name}, {'patched' if patched else 'stock'}:")
            results.append(longest(name, patched, budget_mib, args.resolution, args.longest))
    table = markdown(results, args.budget_gib, machine)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "context.md").write_text(table)
    (out / "context.json").write_text(json.dumps(
        {"budget_gib": args.budget_gib, "machine": machine, "results": results}, indent=1))
    print(table)
    if args.docs:
        readme = REPO_ROOT / "README.md"
        readme.write_text(splice_table(readme.read_text(), table, MARKERS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
