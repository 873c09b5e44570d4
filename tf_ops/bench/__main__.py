"""Command line of the benchmark suite; see tf_ops/bench/__init__.py.

  python -m tf_ops.bench [--quick] [--ops a,b] [--dtypes float32,...]
      [--sizes 10,16,20,24] [--passes forward,grad,fwd+bwd,second] [--reps MIN,MAX]
      [--budget SECONDS] [--allocator default|bfc] [--device /CPU:0]
      [--json PATH] [--plot PATH]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys

_BFC = "TF_CPU_ALLOCATOR_USE_BFC"


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tf_ops.bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="float32, sizes 2^16 and 2^20, few repetitions (about a minute)")
    p.add_argument("--ops", help="comma-separated ops (default: all)")
    p.add_argument("--dtypes", help="comma-separated: float32,float16,bfloat16")
    p.add_argument("--sizes", help="comma-separated log2 sizes (default 10,16,20,24)")
    p.add_argument("--passes", help="comma-separated: forward,grad,fwd+bwd,second")
    p.add_argument("--reps", help="MIN,MAX timed rounds per configuration")
    p.add_argument("--budget", type=float, help="seconds per configuration (default 2)")
    p.add_argument("--allocator", choices=("default", "bfc"), default="default",
                   help="TF's CPU allocator: its default (what users get) or BFC")
    p.add_argument("--device", help="TF device to run on, e.g. /CPU:0 or /GPU:0")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    p.add_argument("--plot", metavar="PATH", help="also write a PNG of the speed-ups")
    return p.parse_args(argv)


def _split(text: str | None) -> tuple[str, ...] | None:
    return tuple(s.strip() for s in text.split(",") if s.strip()) if text else None


def _machine(args: argparse.Namespace) -> dict:
    import tensorflow as tf

    import tf_ops

    from tf_ops.bench.machine import cpu_name

    return {
        "cpu": cpu_name(),
        "cores": os.cpu_count(),
        "gpus": [d.name for d in tf.config.list_physical_devices("GPU")],
        "tensorflow": tf.__version__,
        "allocator": args.allocator,
        "tf_cpu_allocator_use_bfc": os.environ.get(_BFC),
        "cpu_isa": tf_ops.active_cpu_isa(),
        "cpu_extensions": list(tf_ops.active_cpu_extensions()),
        "python": platform.python_version(),
    }


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = _parse(argv)
    # The allocator is chosen when TF starts: re-run with the variable set.
    want_bfc = "true" if args.allocator == "bfc" else "false"
    if os.environ.get(_BFC, "false") != want_bfc:
        os.environ[_BFC] = want_bfc
        os.execv(sys.executable, [sys.executable, "-m", "tf_ops.bench", *argv])
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

    from tf_ops.bench import report
    from tf_ops.bench.cases import CASES
    from tf_ops.bench.suite import PASSES, Config, run

    config = Config()
    if args.quick:
        config = Config(dtypes=("float32",), sizes_log2=(16, 20), min_reps=3, max_reps=30,
                        budget_s=0.3)
    ops = _split(args.ops) or config.ops
    unknown = [o for o in ops if o not in CASES]
    passes = _split(args.passes) or config.passes
    if unknown or any(p not in PASSES for p in passes):
        raise SystemExit(f"tf_ops.bench: unknown op or pass; ops: {', '.join(CASES)}; "
                         f"passes: {', '.join(PASSES)}")
    reps = [int(r) for r in args.reps.split(",")] if args.reps else [config.min_reps,
                                                                      config.max_reps]
    config = Config(
        ops=ops,
        dtypes=_split(args.dtypes) or config.dtypes,
        sizes_log2=tuple(int(s) for s in _split(args.sizes) or config.sizes_log2),
        passes=passes,
        min_reps=reps[0],
        max_reps=reps[-1],
        budget_s=args.budget if args.budget is not None else config.budget_s,
        device=args.device,
    )
    machine = _machine(args)
    print(f"# tf_ops.bench on {machine['cpu']} ({machine['cores']} cores), "
          f"TF {machine['tensorflow']}, {args.allocator} allocator, "
          f"CPU kernels {'+'.join([machine['cpu_isa'], *machine['cpu_extensions']])}",
          file=sys.stderr)
    rows = list(run(config, progress=lambda line: print(line, file=sys.stderr, flush=True)))
    print(report.markdown(rows))
    if args.json:
        with open(args.json, "w") as f:
            f.write(report.to_json(rows, machine))
    if args.plot:
        report.plot(rows, args.plot)


if __name__ == "__main__":
    main()
