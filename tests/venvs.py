"""Virtual environments for the install tests, kept between runs under build-tests/ (git-ignored).

Creating one means installing TensorFlow (~1 min; the wheel is downloaded again each time, as
pip keeps no cache here), so a venv is reused when it still holds what the test asked for (the
same requirements, checked with pip), after the tf_ops a previous run installed is removed.
Anything else (a broken venv, other requirements) is deleted and made again.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from subprocesses import REPO_ROOT

VENVS = REPO_ROOT / "build-tests"
PIP_TIMEOUT_S = 1800  # a cold TensorFlow install on a loaded 2-core machine; builds included
PIP_INSTALL = REPO_ROOT / "tools" / "pip_install.sh"  # pip install, again when a download is cut off


def python(venv: Path) -> Path:
    return venv / "bin" / "python"


def run(args: list, *, timeout: float = PIP_TIMEOUT_S, cwd: Path | None = None, env: dict | None = None,
        check: bool = True) -> subprocess.CompletedProcess:
    """Runs a command (output captured); fails the test with its output when it fails."""
    result = subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, timeout=timeout,
        cwd=cwd or VENVS, env=env or clean_env(),
    )  # fmt: skip
    if check and result.returncode != 0:
        raise AssertionError(
            f"{' '.join(map(str, args))} exited with {result.returncode}\n--- stdout\n"
            f"{result.stdout[-6000:]}\n--- stderr\n{result.stderr[-6000:]}"
        )
    return result


def pip_install(venv: Path, *args) -> subprocess.CompletedProcess:
    """`pip install ARGS` in the venv, through tools/pip_install.sh (the Makefile's retries)."""
    return run([PIP_INSTALL, python(venv), *args])


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without what would put the source tree or another venv on the path."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.update(extra)
    return env


def distributions(venv: Path) -> dict[str, str]:
    """{normalized name: version} of what is installed in the venv."""
    out = run([python(venv), "-m", "pip", "list", "--format=json", "--disable-pip-version-check"]).stdout
    return {d["name"].lower().replace("_", "-"): d["version"] for d in json.loads(out)}


def venv_with(name: str, requirements: list[str]) -> Path:
    """The venv build-tests/NAME with `requirements` installed and no tf_ops; reused when its
    recorded requirements are the same and pip agrees they are met (with no requirements:
    when it runs; what a previous run's tf_ops brought, TensorFlow, stays for pip to reuse)."""
    venv = VENVS / name
    record = venv / "tf_ops-test-requirements.json"
    if record.exists() and json.loads(record.read_text()) == requirements:
        met = run([python(venv), "-m", "pip", "install", "--dry-run", "--no-deps", *requirements]
                  if requirements else [python(venv), "-c", "pass"], check=False)
        if met.returncode == 0 and "Would install" not in met.stdout:
            run([python(venv), "-m", "pip", "uninstall", "--yes", "--quiet", "tf_ops"])
            return venv
    shutil.rmtree(venv, ignore_errors=True)
    VENVS.mkdir(exist_ok=True)
    # sys._base_executable: the interpreter this suite's venv was made from.
    run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", venv])
    if requirements:
        pip_install(venv, "--quiet", *requirements)
    record.write_text(json.dumps(requirements))
    return venv
