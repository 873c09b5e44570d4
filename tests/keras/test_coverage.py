"""docs/models.md is true: the zoo (every keras-hub backbone and causal LM, every
keras.applications model, tiny, random weights) built again, one subprocess per group
(`tf_ops.bench.coverage`), gives the table's rows: the same models checked or left out
(with the same reason), each exact, the same layers fused and left (with the same
reasons), the same attention op. A keras-hub or tf_ops change that loses coverage
fails here; one that gains it asks for the table to be regenerated
(``python -m tf_ops.bench.coverage``). Only the measured numbers (errors, speed) are
not compared."""

from __future__ import annotations

import difflib
import os

import pytest

from tf_ops.bench import coverage

pytestmark = pytest.mark.slow


def test_models_md_is_what_the_zoo_gives(tmp_path):
    pytest.importorskip("keras_hub")
    rows = coverage.run_all(int(os.environ.get("TF_OPS_COVERAGE_JOBS", "2")), tmp_path)
    crashed = [(r["name"], r["why"], r.get("trace")) for r in rows if r["status"] == "crashed"]
    assert not crashed, crashed
    inexact = {r["name"]: (r["stock"], r["patched"]) for r in rows
               if r["status"] == "checked" and r["exact"] is False}
    # Each one the table explains (coverage.NOTES), and no other.
    assert inexact.keys() <= coverage.NOTES.keys(), inexact
    expected = coverage.parse_table(coverage.DOC.read_text())
    got = sorted(tuple(c.replace("|", "/") for c in row) for row in coverage.table_rows(rows))
    diff = "\n".join(difflib.unified_diff([" | ".join(r) for r in expected],
                                          [" | ".join(r) for r in got], "docs/models.md",
                                          "now", lineterm=""))
    assert got == expected, "regenerate with python -m tf_ops.bench.coverage:\n" + diff
