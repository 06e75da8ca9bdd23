#!/bin/bash
# Performance bisection of gpu-dot: runs each ps-NN-<sha> probe (per-sample training loop,
# width 2048, f32, 64 samples x 3 timed epochs after one untimed warm-up epoch) as its own
# process: pass 1 gpu_dot in history order, pass 2 ndarray dot (--dot) in reverse order,
# pass 3 gpu_dot in reverse order (so the two gpu_dot runs of each commit straddle the middle
# of the session). Run from /work/main:  OUT=/some/dir bash .carry/bisect/run.sh
# Appends to $OUT/bisect.txt. DEADLINE (seconds, default 540) skips what would start later.
set -u
: "${OUT:?set OUT}"
mkdir -p "$OUT"
D=$(cd "$(dirname "$0")" && pwd)
R=$OUT/bisect.txt
DEADLINE=${DEADLINE:-540}
T0=$(date +%s)
{
  echo "# bisect session $(date -u +%FT%TZ) host=$(hostname) nproc=$(nproc)"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | sed 's/^/# gpu: /'
  env | grep '^GPU_DOT' | sed 's/^/# env: /'
} | tee -a "$R"
mapfile -t BINS < <(ls "$D"/ps-[0-9][0-9]-* | sort)
REV=(); for ((i=${#BINS[@]}-1; i>=0; i--)); do REV+=("${BINS[$i]}"); done
one() {  # pass flags binary
  local pass=$1 flags=$2 bin=$3 tag el
  tag=$(basename "$bin" | sed 's/^ps-//; s/-/ /')
  el=$(( $(date +%s) - T0 ))
  if [ "$el" -ge "$DEADLINE" ]; then echo "pass=$pass $tag SKIPPED (deadline, ${el}s)" | tee -a "$R"; return; fi
  local t=$EPOCHREALTIME out rc
  out=$(timeout 60 "$bin" $flags 2>&1); rc=$?
  local dt=$(awk "BEGIN{printf \"%.2f\", $EPOCHREALTIME - $t}")
  printf '%s\n' "$out" | sed "s/^/pass=$pass $tag /" | tee -a "$R"
  echo "pass=$pass $tag rc=$rc process_s=$dt" | tee -a "$R"
}
for b in "${BINS[@]}"; do one 1 "--trace" "$b"; done
for b in "${REV[@]}";  do one 2 "--dot"   "$b"; done
for b in "${REV[@]}";  do one 3 "--trace" "$b"; done
echo "# done in $(( $(date +%s) - T0 )) s" | tee -a "$R"
echo "== summary (per_sample_ms: gpu pass1, gpu pass3, dot)" | tee -a "$R"
for b in "${BINS[@]}"; do
  tag=$(basename "$b" | sed 's/^ps-//; s/-/ /')
  g1=$(grep "^pass=1 $tag gpu_dot " "$R" | tail -1 | sed -n 's/.*per_sample_ms=\([0-9.]*\).*/\1/p')
  g3=$(grep "^pass=3 $tag gpu_dot " "$R" | tail -1 | sed -n 's/.*per_sample_ms=\([0-9.]*\).*/\1/p')
  dd=$(grep "^pass=2 $tag dot " "$R" | tail -1 | sed -n 's/.*per_sample_ms=\([0-9.]*\).*/\1/p')
  echo "$tag gpu=${g1:-NA},${g3:-NA} dot=${dd:-NA}" | tee -a "$R"
done
