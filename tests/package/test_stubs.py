"""The type stubs (tf_ops/__init__.pyi, tf_ops/layers.pyi, ...) say what the code has:
most public functions and layers are made at import from the activation table, so only
the stubs show them to editors and type checkers (tools/make_stubs.py writes them)."""

import importlib.util
import pathlib
import subprocess
import sys

import pytest

from subprocesses import REPO_ROOT

_spec = importlib.util.spec_from_file_location("make_stubs", REPO_ROOT / "tools" / "make_stubs.py")
make_stubs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_stubs)


def test_stubs_match_the_code():
    stale = [str(path.relative_to(REPO_ROOT)) for path, text in make_stubs.stubs().items()
             if not path.exists() or path.read_text() != text]
    assert not stale, f"stale stubs {stale}: run `python tools/make_stubs.py`"
    assert (REPO_ROOT / "tf_ops" / "py.typed").exists()


def test_every_public_name_is_in_its_stub():
    import tf_ops
    import tf_ops.layers

    for module in (tf_ops, tf_ops.layers):
        stub = make_stubs.stub_path(module.__name__).read_text()
        missing = [n for n in module.__all__
                   if f"def {n}(" not in stub and f"class {n}(" not in stub
                   and f" as {n}\n" not in stub]
        assert not missing, (module.__name__, missing)


USE = """
import tensorflow as tf
import tf_ops
import tf_ops.layers

x = tf.constant([1.0])
reveal_type(tf_ops.gelu)
reveal_type(tf_ops.layers.GELU)
tf_ops.gelu(x, approximat=True)
"""


@pytest.mark.heavy  # a type checker's process
def test_a_type_checker_sees_the_signatures(tmp_path):
    (tmp_path / "use.py").write_text(USE)
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--python-executable", sys.executable, "--no-incremental",
         "--follow-imports=silent", "--ignore-missing-imports", "use.py"],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
        env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"})
    out = result.stdout
    assert 'Revealed type is "def (features: TensorLike?, approximate: bool =' in out, out
    assert "tf_ops.layers.GELU" in out, out
    assert 'Unexpected keyword argument "approximat" for "gelu"' in out, out
    assert result.returncode == 1 and "Found 1 error" in out, out
