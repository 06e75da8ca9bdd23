#!/usr/bin/env bash
# DGEMM lab driver (run on the GPU machine from anywhere in the repo).
#   tools/dgemm-lab/run.sh [build] [quick] [sanitize] [suite] [M,K,N[,op][,u] ...]
# Default: build quick sanitize suite. Outputs (logs, ptxas reports, SASS stats) go to $OUT.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/dgemm-lab-out}
B=/tmp/dgemm-lab-build
mkdir -p "$OUT" "$B"
[ $# -eq 0 ] && set -- build quick sanitize suite
rc=0
shapes=()
for step in "$@"; do
  case $step in
  build)
    t0=$(date +%s)
    nvcc -O3 -std=c++17 -arch=sm_90 -I kernels -o $B/lab tools/dgemm-lab/dgemm_lab.cu -lcublas \
      > $OUT/build_lab.txt 2>&1 &
    p1=$!
    for a in 90 80 75 70; do
      nvcc -std=c++17 -arch=sm_$a -cubin -I kernels -Xptxas -v -o $B/dgemm_sm$a.cubin kernels/dgemm.cu \
        > $OUT/ptxas_sm$a.txt 2>&1 &
    done
    wait $p1 || { echo "LAB BUILD FAILED"; cat $OUT/build_lab.txt | head -50; exit 1; }
    wait
    for a in 90 80 75 70; do
      s=$(grep -c "bytes spill stores" $OUT/ptxas_sm$a.txt)
      nz=$(grep "spill" $OUT/ptxas_sm$a.txt | grep -vc "0 bytes spill stores, 0 bytes spill loads")
      echo "sm_$a: cubin $( [ -s $B/dgemm_sm$a.cubin ] && echo ok || echo MISSING ), ptxas reports $s, nonzero-spill $nz"
    done
    python3 - "$OUT/ptxas_sm90.txt" > $OUT/regs_sm90.txt <<'PY'
import re,sys
fn=None
for l in open(sys.argv[1]):
    m=re.search(r"Compiling entry function '(\w+)'",l)
    if m: fn=m.group(1)
    m=re.search(r"Used (\d+) registers",l)
    if m and fn: print(f"{fn:36s} {m.group(1)}"); fn=None
PY
    sort -k2 -n $OUT/regs_sm90.txt | awk '{print $2}' | uniq -c | tr '\n' ' '; echo " <- sm90 reg histogram"
    cuobjdump -sass -fun dgemm_tc_128x64_nn $B/dgemm_sm90.cubin > $OUT/sass_big_nn.txt 2>&1
    echo "big_nn SASS: DMMA $(grep -c DMMA $OUT/sass_big_nn.txt) LDS $(grep -c 'LDS' $OUT/sass_big_nn.txt) LDL $(grep -c 'LDL\|STL' $OUT/sass_big_nn.txt)"
    echo "build $(( $(date +%s) - t0 )) s"
    ;;
  variants)  # build tuning variants of the lab in parallel: VARIANTS="name:-DFLAGS ..." ; run "mini" on each
    for v in ${VARIANTS:-}; do
      n=${v%%:*}; f=${v#*:}; f=${f//,/ }
      nvcc -O3 -std=c++17 -arch=sm_90 -I kernels $f -Xptxas -v -o $B/lab_$n tools/dgemm-lab/dgemm_lab.cu -lcublas > $OUT/build_$n.txt 2>&1 &
    done
    wait
    for v in ${VARIANTS:-}; do
      n=${v%%:*}
      echo "=== variant $n: $(grep -A1 'dgemm_tc_128x64_nn\b' $OUT/build_$n.txt | grep -oE 'Used [0-9]+ registers|[0-9]+ bytes spill stores' | tr '\n' ' ')"
      timeout 200 $B/lab_$n mini > $OUT/mini_$n.txt 2>&1 || rc=1
      sed -n '/M x K x N op/,$p' $OUT/mini_$n.txt
    done ;;
  quick)    timeout 300 $B/lab quick > $OUT/quick.txt 2>&1 || rc=1; tail -3 $OUT/quick.txt; grep FAIL $OUT/quick.txt | head -20 ;;
  sanitize)
    for tool in memcheck racecheck synccheck initcheck; do
      timeout 300 compute-sanitizer --tool $tool --error-exitcode 9 $B/lab sanity > $OUT/san_$tool.txt 2>&1 &
    done
    wait
    for tool in memcheck racecheck synccheck initcheck; do
      echo "$tool: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/san_$tool.txt | tr '\n' ' ') $(grep -c 'RESULT: OK' $OUT/san_$tool.txt) ok"
    done ;;
  suite)    timeout 400 $B/lab suite > $OUT/suite.txt 2>&1 || rc=1; sed -n '/M x K x N op/,$p' $OUT/suite.txt ;;
  *)        shapes+=("$step") ;;
  esac
done
if [ ${#shapes[@]} -gt 0 ]; then timeout 300 $B/lab "${shapes[@]}" > $OUT/shapes.txt 2>&1 || rc=1; cat $OUT/shapes.txt; fi
exit $rc
