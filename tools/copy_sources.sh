#!/usr/bin/env bash
# Copies this source tree to DEST: the files git tracks, plus new files it does not ignore
# (so uncommitted work is included and build outputs are not), with their modification times,
# so that a build directory kept outside DEST recompiles only what changed. DEST is emptied
# first: files deleted or renamed here do not linger there.
#   tools/copy_sources.sh DEST        (`make compat` runs this)
set -euo pipefail
dest=${1:?usage: tools/copy_sources.sh DEST}
cd "$(dirname "$0")/.."
rm -rf "$dest"
mkdir -p "$dest"
# `ls-files` still lists tracked files deleted in the work tree: copy only what exists.
git ls-files -z --cached --others --exclude-standard \
  | while IFS= read -r -d '' f; do [[ -e $f ]] && printf '%s\0' "$f"; done \
  | tar --null --files-from=- --create --file=- \
  | tar --extract --file=- --directory="$dest"
echo "tf_ops: sources copied to $dest ($(find "$dest" -type f | wc -l) files)"
