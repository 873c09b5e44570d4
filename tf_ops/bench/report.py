"""Renders benchmark rows: a Markdown table, JSON, and an optional PNG plot."""

from __future__ import annotations

import json
from typing import Sequence


def _ms(row: dict, name: str) -> str:
    if name not in row["ms"]:
        return "n/a"
    ms, spread = row["ms"][name], row["spread"][name]
    text = f"{ms:.3g}" if ms < 100 else f"{ms:.0f}"
    return f"{text} ±{spread * 100:.0f}%"


def _ratio(value: float | None) -> str:
    return "n/a" if value is None else f"**{value:.2f}×**"


def markdown(rows: Sequence[dict]) -> str:
    """One line per (op, dtype, size, pass). Ratios > 1 mean tf_ops is faster;
    "portable cost" is how many times longer the portable composite takes than the
    fused op (what exporting under `tf_ops.portable()` costs in TensorFlow).

    Example:
      >>> print(markdown([]).splitlines()[0])  # doctest: +ELLIPSIS
      | op | dtype | size | pass | tf_ops ms | TF ms | vs TF | ...
    """
    lines = [
        "| op | dtype | size | pass | tf_ops ms | TF ms | vs TF | XLA ms | vs XLA "
        "| eager: tf_ops / TF ms | eager vs TF | tf_ops jit ms | jit vs XLA | × floor "
        "| portable ms | portable cost |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['op']} | {r['dtype']} | 2^{r['size_log2']} | {r['pass']} "
            f"| {_ms(r, 'tf_ops')} | {_ms(r, 'tf')} | {_ratio(r['vs_tf'])} "
            f"| {_ms(r, 'xla')} | {_ratio(r['vs_xla'])} "
            f"| {_ms(r, 'tf_ops_eager')} / {_ms(r, 'tf_eager')} | {_ratio(r['eager_vs_tf'])} "
            f"| {_ms(r, 'tf_ops_xla')} | {_ratio(r['jit_vs_xla'])} | {r['x_floor']:.2f} "
            f"| {_ms(r, 'portable')} | {r['portable_cost']:.2f} |"
        )
    return "\n".join(lines)


def to_json(rows: Sequence[dict], machine: dict) -> str:
    """The rows and a description of the machine and build, as JSON."""
    return json.dumps({"machine": machine, "rows": list(rows)}, indent=1)


def plot(rows: Sequence[dict], path: str) -> None:
    """Speed-up over TF (tf.function) per op and size: one panel per dtype and pass.

    Needs matplotlib (`pip install tf_ops[plot]`).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:  # optional extra
        raise SystemExit(
            "tf_ops.bench: --plot needs matplotlib: pip install matplotlib "
            "(or the tf_ops[plot] extra)"
        ) from e
    dtypes = sorted({r["dtype"] for r in rows})
    passes = [p for p in ("forward", "grad", "fwd+bwd", "second") if any(r["pass"] == p for r in rows)]
    fig, axes = plt.subplots(
        len(dtypes), len(passes), figsize=(4.5 * len(passes), 3.2 * len(dtypes)),
        squeeze=False, sharey=True,
    )
    for i, dtype in enumerate(dtypes):
        for j, pass_ in enumerate(passes):
            ax = axes[i][j]
            for op in dict.fromkeys(r["op"] for r in rows):
                pts = sorted(
                    (r["size_log2"], r["vs_tf"])
                    for r in rows
                    if r["op"] == op and r["dtype"] == dtype and r["pass"] == pass_
                )
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=op)
            ax.axhline(1.0, color="grey", linewidth=0.8)
            ax.set_yscale("log", base=2)
            ax.set_title(f"{dtype}, {pass_}")
            ax.set_xlabel("log2(elements)")
            if j == 0:
                ax.set_ylabel("speed-up vs TF (×)")
    axes[0][0].legend(fontsize=7)
    fig.suptitle("tf_ops speed-up over TensorFlow (tf.function), higher is better")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

