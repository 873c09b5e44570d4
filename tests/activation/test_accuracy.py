"""The library's accuracy against docs/ops.md's accuracy table, with the
TF-free accuracy tool (tools/accuracy/): a sampled sweep (every half and
bfloat16 input, 2^21 float32 inputs spread over all bit patterns plus the
inputs where the full sweep found each maximum) of every op, attribute
variant, pass, dtype and instruction-set path, against a double reference.

Fails when an error exceeds its documented bound, when an op has no row in
the table, when NaN, infinities or zero signs come out wrong, or when an error
exceeds the tolerance tests/op_specs.py gives that op (the tolerances are
justified by the sweep: see test_sampled_sweep_within_test_tolerances). The
full sweep that writes the table is `make accuracy`."""

from __future__ import annotations

import importlib.util
import re
import struct
import subprocess
from pathlib import Path

import pytest

import tensorflow as tf
from op_specs import EPS, SPECS

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "accuracy_table", ROOT / "tools" / "accuracy" / "accuracy_table.py"
)
accuracy_table = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(accuracy_table)

DTYPES = {"float32": tf.float32, "half": tf.half, "bfloat16": tf.bfloat16}


def _attrs_text(attrs: dict) -> str:
    """op_specs attributes as the tool names its variants: "alpha=0.2"."""

    def value(v):
        return str(v).lower() if isinstance(v, bool) else f"{v:g}"

    return ",".join(f"{k}={value(v)}" for k, v in sorted(attrs.items()))


def _tolerance_lines() -> list[str]:
    """tests/op_specs.py's tolerance of every op, variant, pass and dtype, for
    an upstream gradient of 1, in the tool's "op attrs pass dtype rtol atol"."""
    lines = []
    for spec in SPECS:
        for attrs in spec.attr_variants:
            for name, dtype in DTYPES.items():
                fwd = spec.tolerance(dtype)
                grad = spec.grad_tolerance(dtype, [1.0])
                a = _attrs_text(attrs) or "-"
                lines.append(f"{spec.name} {a} forward {name} {fwd.rtol!r} {fwd.atol!r}")
                lines.append(f"{spec.name} {a} grad {name} {grad.rtol!r} {grad.atol!r}")
    return lines


@pytest.fixture(scope="module")
def sweep_binary() -> Path:
    return accuracy_table.build(ROOT / "build-accuracy")


@pytest.fixture(scope="module")
def table() -> dict:
    return accuracy_table.parse((ROOT / "docs" / "ops.md").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def sampled(sweep_binary, table, tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("accuracy")
    tolerances = tmp / "tolerances.txt"
    tolerances.write_text("\n".join(_tolerance_lines()) + "\n")
    extras = ",".join(hex(b) for b in accuracy_table.worst_float32_inputs(table))
    results, _ = accuracy_table.sweep(
        sweep_binary,
        [*accuracy_table.test_sample_args(),
         "--extra-float-bits", extras, "--tolerances", str(tolerances)],
        tmp / "sample.json", timeout=600,
    )
    return results


@pytest.mark.heavy  # builds tools/accuracy/ and runs the sampled sweep
def test_sampled_sweep_within_documented_bounds(sampled, table):
    problems = accuracy_table.violations(sampled, table)
    assert not problems, "\n".join(problems)


@pytest.mark.heavy  # the sampled sweep
def test_sweep_covers_every_op_and_variant_of_the_tests(sampled):
    """The tool's attribute variants (tools/accuracy/reference.h) are the ones
    tests/op_specs.py tests, and every activation is swept."""
    swept = {(r["op"], r["attrs"]) for r in sampled["rows"]}
    tested = {(s.name, _attrs_text(a)) for s in SPECS for a in s.attr_variants}
    assert swept == tested


@pytest.mark.heavy  # the sampled sweep
def test_sampled_sweep_within_test_tolerances(sampled):
    """Every error outside the underflow tail is within tests/op_specs.py's
    tolerance for that op and dtype (rtol |want| + atol, upstream gradient 1):
    the sweep covers every half and bfloat16 input and the whole float32
    range, where the value tests sample 10^[-3, 1)."""
    over = [
        f"{r['op']} {r['attrs']} {r['pass']} {r['dtype']} {r['isa']}: "
        f"{r['tolerance_ratio']:.3g}x the tolerance at {r['tolerance_at_bits']}"
        for r in sampled["rows"]
        if r["tolerance_ratio"] > 1
    ]
    assert not over, "\n".join(over)
    assert all(r["tolerance_ratio"] >= 0 for r in sampled["rows"]), "a row had no tolerance"


def test_documented_bounds_imply_test_tolerances(table):
    """The relationship between the table and tests/op_specs.py: a forward
    op's error of B ulps of its dtype is at most B * eps * |y|, so the tests'
    relative tolerance must be at least that: B * eps <= rtol. (Grad ops of
    Gelu, Swish and Mish are measured in ulps of their terms, and checked
    against the tolerance element by element in the test above.)"""
    too_tight = []
    for spec in SPECS:
        for attrs in spec.attr_variants:
            for name, dtype in DTYPES.items():
                entry = table[(spec.name, _attrs_text(attrs), "forward", name)]
                for path, cell in entry["paths"].items():
                    if cell is None:
                        continue
                    rtol = spec.tolerance(dtype).rtol
                    if cell[0] * EPS[dtype] > rtol:
                        too_tight.append(
                            f"{spec.name} {attrs} {name} {path}: documented {cell[0]} ulp = "
                            f"{cell[0] * EPS[dtype]:.3g} relative > rtol {rtol:.3g}"
                        )
    assert not too_tight, "\n".join(too_tight)


@pytest.mark.heavy  # builds and runs the accuracy tool
def test_tool_reports_a_perturbed_op(sweep_binary, table, tmp_path):
    """The tool can fail: Gelu's forward results moved 4 representable
    numbers away from zero (--perturb) exceed the documented bounds, on every
    dtype and path, and nothing else does."""
    results, _ = accuracy_table.sweep(
        sweep_binary,
        ["--ops", "Gelu", "--sample", "65536", "--perturb", "Gelu/approximate=false:forward:4"],
        tmp_path / "perturbed.json", timeout=300,
    )
    problems = accuracy_table.violations(results, table)
    flagged = {
        (m.group(1), m.group(2), m.group(3))
        for m in (re.match(r"Gelu approximate=false (\w+) (\w+) (\w+):", p) for p in problems)
        if m
    }
    paths = {r["isa"] for r in results["rows"]}
    assert flagged == {("forward", d, p) for d in DTYPES for p in paths}, problems
    assert all(p.startswith("Gelu approximate=false forward") for p in problems), problems


@pytest.mark.heavy  # builds and runs the accuracy tool
def test_tool_reports_wrong_special_values(sweep_binary, table, tmp_path):
    """The tool can fail on special values too: Swish's grad op giving NaN
    at +-inf (--perturb ...:nan) is reported on every dtype and path."""
    results, _ = accuracy_table.sweep(
        sweep_binary,
        ["--ops", "Swish", "--sample", "4096", "--perturb", "Swish/beta=1:grad:nan"],
        tmp_path / "perturbed.json", timeout=300,
    )
    problems = accuracy_table.violations(results, table)
    paths = {r["isa"] for r in results["rows"]}
    assert len(problems) == len(DTYPES) * len(paths), problems
    assert all(
        p.startswith("Swish beta=1 grad") and "special values wrong" in p for p in problems
    ), problems


@pytest.mark.heavy  # builds and runs the accuracy tool
def test_written_table_holds_at_its_own_inputs(sweep_binary, tmp_path):
    """`make test` measures every variant at every input where the table found a maximum, so
    the tool measures those inputs again before it leaves a table. From a sweep of Swish's
    default beta=1 alone at x = -87.3365 (its largest underflow tail error), the written
    table has a row for every op and variant, and a sweep of all of them at the table's own
    inputs stays within it. (Without that step the table held Swish beta=1 alone; and a full
    sweep's table was once below `make test`'s sample: Swish beta=-1's tail at x = 87.3365,
    where Sigmoid's grad tail had its maximum.)"""
    x = struct.unpack("<I", struct.pack("<f", -87.3365479))[0]
    seed = tmp_path / "swish-beta1.json"
    accuracy_table.sweep(
        sweep_binary,
        ["--ops", "Swish", "--variants", "default", "--dtypes", "float32", "--sample", "1",
         "--extra-float-bits", hex(x)],
        seed, timeout=300,
    )
    doc = tmp_path / "ops.md"
    doc.write_text(f"## Accuracy\n\n{accuracy_table.BEGIN}\n{accuracy_table.END}\n")
    status = accuracy_table.main(["--build-dir", str(sweep_binary.parent), "--from-json", str(seed),
                                  "--write", str(doc), "--check", str(doc)])  # fmt: skip
    table = accuracy_table.parse(doc.read_text(encoding="utf-8"))
    assert status == 0
    assert {key[0] for key in table} == {spec.name for spec in SPECS}
    inputs = accuracy_table.worst_float32_inputs(table)
    assert x in inputs
    again, _ = accuracy_table.sweep(
        sweep_binary,
        ["--variants", "all", "--sample", "1", "--extra-float-bits", ",".join(map(hex, inputs))],
        tmp_path / "again.json", timeout=300,
    )
    assert not accuracy_table.violations(again, table)


@pytest.mark.heavy  # builds and runs the accuracy tool
def test_double_reference_is_enough(sweep_binary):
    """The reference is computed in double; long double agrees with it to a
    tiny fraction of a float32 ulp on every op (so errors are quoted to 3
    significant digits honestly)."""
    out = subprocess.run(
        [str(sweep_binary), "--check-reference", "--variants", "all", "--sample", str(2**18)],
        capture_output=True, text=True, check=True, timeout=300,
    ).stdout
    worst = float(re.search(r"largest difference: (\S+) float32 ulp", out).group(1))
    assert worst < 1e-3, out
