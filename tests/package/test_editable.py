"""`make build` leaves its venv able to `import tf_ops` from any folder: a .pth file in the
venv's site-packages puts this source tree on sys.path, after site-packages, so the package and
the library `make build` compiled here are what any folder imports (nothing is built or copied
twice), while PYTHONPATH and sys.path entries before it still win (as the tests' package copies
need)."""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

from subprocesses import REPO_ROOT
from venvs import clean_env

# Fresh processes: make test only, not test-quick.
pytestmark = pytest.mark.heavy

PTH = Path(sysconfig.get_path("purelib")) / "tf_ops_source_tree.pth"

_WHERE = textwrap.dedent(
    """
    import json, sys
    import tf_ops
    print(json.dumps({"package": tf_ops.__file__, "library": tf_ops.library_path(),
                      "value": tf_ops.leaky_relu([-2.0], alpha=0.5).numpy().tolist()}))
    """
)


def _run(code: str, cwd: Path, **env: str) -> str:
    """Runs `code` in this suite's Python, from `cwd`, without the suite's PYTHONPATH."""
    result = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True,
                            timeout=300, env=clean_env(**env))  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout.strip().splitlines()[-1]


def test_make_build_wrote_the_path_file():
    assert PTH.read_text() == f"{REPO_ROOT}\n", f"{PTH}: run `make build` for this venv ({sys.prefix})"


def test_any_folder_imports_the_package_and_library_of_this_tree(tmp_path):
    found = json.loads(_run(_WHERE, tmp_path))
    assert Path(found["package"]) == REPO_ROOT / "tf_ops" / "__init__.py", found
    assert Path(found["library"]) == REPO_ROOT / "tf_ops" / "_tf_ops.so", found
    assert found["value"] == [-1.0]


def test_pythonpath_still_comes_first(tmp_path):
    shadow = tmp_path / "shadow" / "tf_ops"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("")
    found = _run("import tf_ops; print(tf_ops.__file__)", tmp_path, PYTHONPATH=str(shadow.parent))
    assert Path(found) == shadow / "__init__.py", found
