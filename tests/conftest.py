"""Test-suite configuration: hypothesis profiles.

"tf_ops" (the default) makes every property test deterministic: examples are
derived from each test's source (derandomize), nothing is read from or written
to a local example database, and there is no per-example deadline (the first
call of an op with a new dtype or attribute compiles nothing but is slower).
A failure prints the failing example and reproduces on every run.

"tf_ops-explore" draws fresh random examples (and remembers failures) for
searching beyond the fixed set: `pytest --hypothesis-profile=tf_ops-explore
[--hypothesis-seed=N] tests/test_properties.py`.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings

_COMMON = dict(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.register_profile("tf_ops", derandomize=True, database=None, **_COMMON)
settings.register_profile("tf_ops-explore", derandomize=False, **_COMMON)
# --hypothesis-profile on the command line is applied after this and wins.
settings.load_profile("tf_ops")
