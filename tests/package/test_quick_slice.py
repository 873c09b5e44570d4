"""`make test-quick`'s slice (conftest.py, ``--slice N``): every parametrized test keeps its
first case and every N-th after it, so each file and function still runs; without the
option nothing is left out (CI)."""

from __future__ import annotations

import collections
import subprocess
import sys

import pytest

from subprocesses import REPO_ROOT

# Pytest processes: make test only, not test-quick.
pytestmark = pytest.mark.heavy

# Two files: one of parametrized tests over specs and dtypes, one with plain tests too.
FILES = ["tests/activation/test_values.py", "tests/package/test_docs.py"]


def _collected(*args: str) -> list[str]:
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", *args, *FILES],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [line for line in done.stdout.splitlines() if "::" in line]


def _function(nodeid: str) -> str:
    return nodeid.split("[")[0]


def test_slice_keeps_the_first_and_every_nth_case_of_each_function():
    everything, sliced = _collected(), _collected("--slice=4")
    index = collections.Counter()
    expected = []
    for nodeid in everything:
        if index[_function(nodeid)] % 4 == 0:
            expected.append(nodeid)
        index[_function(nodeid)] += 1
    assert sliced == expected
    assert {_function(n) for n in sliced} == {_function(n) for n in everything}
    assert len(sliced) < len(everything) / 2, (len(sliced), len(everything))
