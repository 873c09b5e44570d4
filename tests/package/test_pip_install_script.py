"""tools/pip_install.sh, the set-up's pip install (Makefile, tests/venvs.py): it starts a failed
install again, up to three attempts, says how much disk was free after each failure, and
passes pip's exit status on. Run with a fake interpreter that records its calls and fails as
told, so nothing is downloaded."""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

from subprocesses import REPO_ROOT

SCRIPT = REPO_ROOT / "tools" / "pip_install.sh"


def _fake_python(tmp_path: Path, failures: int) -> Path:
    """An executable that appends its arguments to calls.txt and exits 3 for its first
    `failures` calls, 0 after."""
    fake = tmp_path / "bin" / "python"
    fake.parent.mkdir()
    fake.write_text(textwrap.dedent(f"""\
        #!/usr/bin/env bash
        echo "$@" >> {tmp_path}/calls.txt
        [ "$(wc -l < {tmp_path}/calls.txt)" -gt {failures} ] || exit 3
        """))
    fake.chmod(0o755)
    return fake


def _run(fake: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PIP_INSTALL_RETRY_WAIT_S="0")
    return subprocess.run([str(SCRIPT), str(fake), "--quiet", "some-package"], env=env,
                          capture_output=True, text=True, timeout=60)


def test_a_failed_install_is_started_again(tmp_path):
    result = _run(_fake_python(tmp_path, failures=2))
    assert result.returncode == 0, result.stderr
    calls = (tmp_path / "calls.txt").read_text().splitlines()
    assert calls == ["-m pip install --quiet some-package"] * 3
    assert result.stderr.count("free space:") == 2
    assert "attempt 2 of 3" in result.stderr


def test_three_failures_give_pips_status(tmp_path):
    result = _run(_fake_python(tmp_path, failures=5))
    assert result.returncode == 3
    assert len((tmp_path / "calls.txt").read_text().splitlines()) == 3
    assert "failed 3 times (exit 3)" in result.stderr


def test_success_runs_pip_once(tmp_path):
    result = _run(_fake_python(tmp_path, failures=0))
    assert result.returncode == 0 and result.stderr == ""
    assert len((tmp_path / "calls.txt").read_text().splitlines()) == 1
