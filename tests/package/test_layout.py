"""The test suite's layout (tests/README.md): every test file in its family's folder or
one of the others, basenames unique (the folders are not packages), and `--family NAME`
keeping exactly the files of tests/NAME/."""

from __future__ import annotations

import collections
import subprocess
import sys

import pytest

from subprocesses import REPO_ROOT, TESTS

# The folders that hold tests of no single op family.
OTHER_FOLDERS = {"keras", "bench", "package"}


def _families() -> set[str]:
    return {p.parent.name for p in (REPO_ROOT / "tf_ops" / "python").glob("*/manifest.py")}


def test_every_test_file_is_in_a_family_folder_or_a_named_one():
    files = sorted(TESTS.rglob("test_*.py"))
    assert files
    folders = {p.relative_to(TESTS).parts[0] for p in files}
    stray = [str(p.relative_to(TESTS)) for p in files
             if len(p.relative_to(TESTS).parts) != 2 or p.parent.name not in _families() | OTHER_FOLDERS]
    assert not stray, f"test files outside tests/<family>/ and tests/{sorted(OTHER_FOLDERS)}/: {stray}"
    assert _families() <= folders, f"families without tests: {sorted(_families() - folders)}"
    twice = [name for name, n in collections.Counter(p.name for p in files).items() if n > 1]
    assert not twice, f"the same basename in two folders (pytest imports them by name): {twice}"
    assert not list(TESTS.rglob("__init__.py"))


@pytest.mark.heavy  # a pytest process
def test_family_option_keeps_that_folders_files_only():
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "--family=rotary",
         "tests/rotary", "tests/norm", "tests/bench"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    files = {line.split("::")[0] for line in done.stdout.splitlines() if "::" in line}
    expected = {str(p.relative_to(REPO_ROOT)) for p in (TESTS / "rotary").glob("test_*.py")}
    assert files == expected
