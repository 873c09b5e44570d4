#!/usr/bin/env bash
# `PYTHON -m pip install ARGS...`, started again when it fails: a download cut off part way
# (CI once saw the 572 MB TensorFlow wheel stop at 528.7 MB, and pip's six resumes all stop
# there) is fetched again from the beginning, up to three attempts in all, 30 and 60 s apart.
# Every pip download of the project's own set-up (Makefile, tests/venvs.py) goes through here.
# PIP_RESUME_RETRIES: pip >= 25.1 resumes a cut-off download that many times per attempt (older
# pips ignore the variable). PIP_INSTALL_RETRY_WAIT_S: the first wait (30; the second is twice it).
# usage: tools/pip_install.sh PYTHON [pip install arguments...]
set -uo pipefail
python=$1
shift
export PIP_RESUME_RETRIES=${PIP_RESUME_RETRIES:-10}
attempts=3
wait_s=${PIP_INSTALL_RETRY_WAIT_S:-30}
for attempt in $(seq "$attempts"); do
  "$python" -m pip install "$@" && exit 0
  status=$?
  # A full disk also shows as "Connection interrupted" (and a resumed download that fails its
  # hash): say how much room there was.
  echo "tools/pip_install.sh: free space: $(df -h --output=avail "${TMPDIR:-/tmp}" | tail -n 1)" \
    "in ${TMPDIR:-/tmp}, $(df -h --output=avail "$(dirname "$python")" | tail -n 1) for the venv" >&2
  if [ "$attempt" = "$attempts" ]; then
    echo "tools/pip_install.sh: pip install failed $attempts times (exit $status)" >&2
    exit "$status"
  fi
  echo "tools/pip_install.sh: pip install failed (exit $status, attempt $attempt of" \
    "$attempts; a download may have been cut off): again in $((attempt * wait_s)) s" >&2
  sleep $((attempt * wait_s))
done
