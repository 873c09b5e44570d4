"""The coverage table's speed rows survive a regeneration without ``--speed``: what
`markdown` writes of them, `parse_speed` reads back, the machine they ran on included."""

from tf_ops.bench import coverage


def test_speed_rows_and_their_machine_read_back():
    speed = {"name": "ViTBackbone", "speedup": 1.14, "low": 1.09, "high": 1.18,
             "stock_ms": 41.8, "patched_ms": 36.25, "rounds": 41,
             "machine": "AMD EPYC, 2 cores, CPU kernels: avx2"}
    rows = [{"name": "ViTBackbone", "source": "keras-hub", "status": "left out",
             "why": "a test row", "speed": speed}]
    text = coverage.markdown(rows)
    assert "Measured on: AMD EPYC, 2 cores, CPU kernels: avx2." in text
    assert coverage.parse_speed(text) == {"ViTBackbone": speed}
