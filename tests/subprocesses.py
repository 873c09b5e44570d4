"""Running Python scripts in fresh processes that import tf_ops from this source tree."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

# The shared helpers live at the top of tests/, the tests one folder down (tests/README.md).
TESTS = Path(__file__).resolve().parent
REPO_ROOT = TESTS.parent
SCRIPTS = TESTS / "scripts"


def python_env(**extra: str) -> dict[str, str]:
    """The environment of a child Python: finds tf_ops in this tree, quiet TF logs."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.update(extra)
    return env


def run_python(script: Path, *args: str, timeout: float, **env: str) -> subprocess.CompletedProcess:
    """Runs `script` with this interpreter; fails the test, showing its output, when it
    exits non-zero or runs past `timeout` seconds."""
    try:
        result = subprocess.run(
            [sys.executable, str(script), *map(str, args)],
            env=python_env(**env),
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as e:
        raise AssertionError(
            f"{script.name} ran past {timeout} s\n--- stdout\n{_text(e.stdout)}"
            f"\n--- stderr\n{_text(e.stderr)[-6000:]}"
        ) from None
    assert result.returncode == 0, (
        f"{script.name} exited with {result.returncode}\n--- stdout\n{result.stdout}"
        f"\n--- stderr\n{result.stderr[-6000:]}"
    )
    return result


def _text(output: str | bytes | None) -> str:
    # TimeoutExpired carries bytes even when the run asked for text.
    if isinstance(output, bytes):
        return output.decode(errors="replace")
    return output or ""
