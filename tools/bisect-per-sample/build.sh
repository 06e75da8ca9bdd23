#!/usr/bin/env bash
# Builds the per-sample probe (probe/src/main.rs) against each commit listed in commits.txt
# ("NN sha …" per line), into OUT_DIR/ps-NN-sha, for run.sh on a GPU machine:
#
#   tools/bisect-per-sample/build.sh [OUT_DIR]      # default .carry/bisect
#   tar cJf .carry/bisect.tar.xz -C .carry bisect   # then, on the device:
#   tar xJf .carry/bisect.tar.xz -C .carry && bash .carry/bisect/run.sh
#
# Each commit is built from a detached worktree with its own Cargo.lock; one target folder
# keeps the dependencies between builds.
set -euo pipefail
top=$(git rev-parse --show-toplevel)
here="$top/tools/bisect-per-sample"
out=$(realpath -m "${1:-$top/.carry/bisect}")
work=$(mktemp -d /tmp/bisect-per-sample.XXXXXX)
mkdir -p "$out"
cp -r "$here/probe" "$work/probe"
cp "$here/run.sh" "$here/commits.txt" "$out/"
export CARGO_TARGET_DIR="$work/target"
grep -v '^#' "$here/commits.txt" | while read -r nn sha _; do
  dst="$out/ps-$nn-$sha"
  [ -f "$dst" ] && continue
  git -C "$top" worktree add --detach "$work/wt" "$sha" >/dev/null
  cp "$work/wt/Cargo.lock" "$work/probe/Cargo.lock"
  (cd "$work/probe" && cargo build --release --offline --quiet)
  strip -o "$dst" "$CARGO_TARGET_DIR/release/ps"
  git -C "$top" worktree remove --force "$work/wt"
  echo "built $nn $sha"
done
git -C "$top" worktree prune
rm -rf "$work"
