"""The context search (`python -m tf_ops.bench.context`): the doubling and bisection find
the longest length within the budget, the table says what was found (a search that
reached its cap says "≥"), the README has the table's markers, and a probe measures a
real train step of a long-context model at another length, stock and patched."""

from __future__ import annotations

import pytest

from tf_ops.bench import context, model_zoo
from tf_ops.bench.models import splice_table


def _fake(monkeypatch, limit: int, mib_per_token: float = 1.0):
    calls = []

    def measure(name, seq, patched):
        calls.append(seq)
        if seq > limit * 2:
            return None  # out of memory: the step did not run
        return seq * mib_per_token

    monkeypatch.setattr(context, "_measure", measure)
    return calls


def test_doubling_then_bisection_finds_the_longest_length_within_the_budget(monkeypatch):
    calls = _fake(monkeypatch, limit=5000)
    found = context.longest("LLaMA 2k", True, budget_mib=5000, resolution=256, top=65536)
    assert calls[:4] == [1024, 2048, 4096, 8192]
    assert found["first_over"] - found["longest"] <= 256
    assert found["longest"] <= 5000 < found["first_over"]
    assert not found["capped"]
    assert all(seq % 128 == 0 for seq in calls)


def test_a_step_that_does_not_run_counts_as_over_the_budget(monkeypatch):
    _fake(monkeypatch, limit=1500)  # 4096 does not run at all
    found = context.longest("GPT-2 2k", False, budget_mib=10**6, resolution=512, top=65536)
    assert found["measured"]["4096"] is None
    assert 2048 <= found["longest"] and found["first_over"] <= 4096


def test_a_search_that_reaches_its_cap_is_a_lower_bound(monkeypatch):
    _fake(monkeypatch, limit=10**6)
    found = context.longest("LLaMA 2k", True, budget_mib=10**6, resolution=512, top=4096)
    assert found["capped"] and found["longest"] == 4096
    stock = dict(found, patched=False, capped=False, longest=2048)
    table = context.markdown([stock, found], 4, "test machine")
    assert "| LLaMA | 2,048 | ≥ 4,096 | ≥ 2.0× |" in table  # a lower bound both


def test_the_readme_holds_the_tables_markers():
    readme = (context.REPO_ROOT / "README.md").read_text()
    spliced = splice_table(readme, "TABLE\n", context.MARKERS)
    assert "TABLE" in spliced and spliced.count(context.MARKERS[0]) == 1


def test_the_long_context_models_are_the_searched_ones():
    assert context._parse([]).models == [n for n, c in model_zoo.CASES.items()
                                        if c.long_context]
    with pytest.raises(SystemExit):
        context._parse(["--models", "ResNet50"])


@pytest.mark.heavy  # a keras-hub model's train step
@pytest.mark.parametrize("patched", [False, True])
def test_a_probe_runs_a_train_step_at_another_length(patched):
    pytest.importorskip("keras_hub")
    result = context._probe("LLaMA 2k", 128, patched)
    assert result["mib"] > 0 and result["step_s"] > 0
