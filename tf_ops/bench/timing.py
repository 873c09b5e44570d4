"""Interleaved timing: every candidate of one configuration is timed in turns.

Absolute times on shared machines drift by tens of percent from run to run;
timing all candidates in the same rounds (rotating their order) makes drift
hit each alike, so the ratios between them are what to read.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Callable, Sequence

import tensorflow as tf


@dataclasses.dataclass
class Timing:
    """Per-call wall times of one candidate, in seconds."""

    samples: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def spread(self) -> float:
        """Half the interquartile range, relative to the median."""
        if len(self.samples) < 4:
            return (max(self.samples) - min(self.samples)) / 2 / self.median
        q1, _, q3 = statistics.quantiles(self.samples, n=4)
        return (q3 - q1) / 2 / self.median


def ratio_quartiles(numerator: Timing, denominator: Timing) -> tuple[float, float, float]:
    """(first quartile, median, third quartile) of the per-round ratios
    numerator / denominator of two candidates timed in the same rounds.

    Example:
      >>> ratio_quartiles(Timing([2.0, 4.0]), Timing([1.0, 2.0]))
      (2.0, 2.0, 2.0)
    """
    ratios = [a / b for a, b in zip(numerator.samples, denominator.samples)]
    if len(ratios) < 2:
        return ratios[0], ratios[0], ratios[0]
    low, high = (statistics.quantiles(ratios, n=4, method="inclusive")[i] for i in (0, 2))
    return low, statistics.median(ratios), high


def _wait(result) -> None:
    """Blocks until the result is computed (GPU ops run asynchronously), without
    copying it: reading every output into NumPy, as this did before 2026-12-03 (stop
    35), added a copy of all outputs to every candidate's time (about 50 ms per 128 MiB
    here), the same for each, which pulled the ratios toward 1."""
    sync = getattr(tf.test.experimental, "sync_devices", None)  # TensorFlow >= 2.13
    if sync is not None:
        sync()
        return
    for t in tf.nest.flatten(result):  # one element of each output: waits, copies nothing
        if isinstance(t, tf.Tensor) and t.shape.num_elements() != 0:
            tf.reshape(t, [-1])[:1].numpy()


def time_interleaved(
    candidates: dict[str, Callable[[], object]],
    min_reps: int,
    max_reps: int,
    budget_s: float,
) -> dict[str, Timing]:
    """Times each zero-argument callable in rotating rounds after a warm-up.

    The number of rounds is as many as fit in `budget_s` (judged from the
    warm-up), within [min_reps, max_reps].

    Example:
      >>> t = time_interleaved({"a": lambda: tf.zeros([4])}, 3, 5, 0.1)
      >>> sorted(t)
      ['a']
    """
    names = list(candidates)
    per_round = 0.0
    for name in names:  # warm-up: traces, compiles, first allocations
        _wait(candidates[name]())
        start = time.perf_counter()
        _wait(candidates[name]())
        per_round += time.perf_counter() - start
    reps = int(budget_s / max(per_round, 1e-9))
    reps = max(min_reps, min(max_reps, reps))
    samples: dict[str, list[float]] = {name: [] for name in names}
    for r in range(reps):
        order: Sequence[str] = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            fn = candidates[name]
            start = time.perf_counter()
            _wait(fn())
            samples[name].append(time.perf_counter() - start)
    return {name: Timing(s) for name, s in samples.items()}
