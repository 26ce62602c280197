#!/usr/bin/env bash
# Issue 39: every prepared CUDA check and benchmark in ONE device call (see benchmarks/gpu/README.md).
#
#   bash benchmarks/gpu/run.sh          # on the GPU machine, with .whl carried (fetch_wheels.sh)
#   bash benchmarks/gpu/run.sh --cpu    # the same steps here, small, CUDA-only parts "skipped: no CUDA"
#
# Writes $OUT/report.json, run.log, checks.json and bench.json ($OUT defaults to ./gpu-out); exits
# non-zero if any step failed. Each step is timed and has a timeout; the whole fits ~8 minutes on a GPU.
set -uo pipefail
CPU=0
[ "${1:-}" = "--cpu" ] && CPU=1
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
OUT="${OUT:-$ROOT/gpu-out}"
mkdir -p "$OUT"
LOG="$OUT/run.log"
: > "$LOG"
RESULTS="$(mktemp)"
export PYTHONUNBUFFERED=1
PY=python3
TMPD="$(mktemp -d)"  # the carried wheels' site, the background steps' output
SITE="$TMPD/site"

if [ $CPU = 1 ]; then
    # a check of the script, no figure: the tiny GPT, one round of the contenders (1 + 20 steps), no compile;
    # the contenders forked from bench_gpu.py once it has imported torch, not three fresh Pythons (issue 53)
    BENCH=(--device cpu --small --repeats 1 --warmup 1 --compile-pairs 0 --fork); DEV=cpu
    T_TESTS=120; T_BENCH=120
    THREADS=1  # the side-by-side steps' torch threads: 3 processes of 4 threads on 2 cores mostly spin-wait
else
    # the nanoGPT-sized GPT in bf16: 4 rounds of hand-written / headless / dashboard, one compiled pair
    # (bench_gpu.py starts no triple or pair that its --budget cannot fit; the step's timeout is above it)
    BENCH=(--device cuda --repeats 4 --steps 300 --warmup 50 --compile-pairs 1 --budget 270); DEV=cuda
    T_TESTS=120; T_BENCH=300  # with versions, wheels, imports (~40 s) and the kills' grace: ~490 s at worst
    THREADS=4
fi
BENCH+=(--json "$OUT/bench.json")

log() { echo "$*" | tee -a "$LOG"; }

# step NAME TIMEOUT CMD...: runs CMD under `timeout`, its output into the log; records pass/fail
step() {
    local name=$1 limit=$2; shift 2
    log ""; log "=== $name (timeout ${limit}s): $*"
    local t0=$(date +%s%N)
    timeout -k 10 "$limit" "$@" 2>&1 | tee -a "$LOG"
    local rc=${PIPESTATUS[0]}
    local ms=$(( ($(date +%s%N) - t0) / 1000000 )); local secs=$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))
    local status=pass
    [ "$rc" != 0 ] && status=fail
    [ "$rc" = 124 ] || [ "$rc" = 137 ] && status="fail: timed out"
    log "=== $name: $status (rc $rc, ${secs}s)"
    printf '%s\t%s\t%s\t%s\n' "$name" "$status" "$rc" "$secs" >> "$RESULTS"
}
# step_bg NAME TIMEOUT CMD...: the same, in the background, its output kept apart until wait_steps
# (the tests and checks run side by side: the device has 16 cores; the benchmark runs alone after)
BG=()
step_bg() {
    local name=$1 limit=$2; shift 2
    log "=== $name: started in the background (timeout ${limit}s): $*"
    ( t0=$(date +%s%N); timeout -k 10 "$limit" "$@" > "$TMPD/$name.log" 2>&1; rc=$?
      echo "$rc $(( ($(date +%s%N) - t0) / 1000000 ))" > "$TMPD/$name.rc" ) &
    BG+=("$name")
}
# collect_bg TIMEOUT NAME PYTEST_ARGS... [::: NAME PYTEST_ARGS...]: each group `python -m pytest PYTEST_ARGS`
# (`python SCRIPT.py ARGS` or `python -c CODE` where its ARGS start so) in the background, a step as
# step_bg's (its log, status and time), all forked from one Python that has imported torch once (collect.py;
# on --cpu, where the tests are only collected); a group that has no exit status when it ends (a timeout,
# collect.py failing before it) gets collect.py's, and its output if none
collect_bg() {
    local limit=$1; shift
    local names=() group=() a cmd
    for a in "$@" :::; do
        if [ "$a" != ::: ]; then group+=("$a"); continue; fi
        names+=("${group[0]}")
        cmd="$PY -m pytest"; [[ "${group[1]:-}" == *.py || "${group[1]:-}" == -c ]] && cmd=$PY
        log "=== ${group[0]}: started in the background, forked by collect.py (timeout ${limit}s): $cmd ${group[*]:1}"
        group=()
    done
    ( t0=$(date +%s%N); timeout -k 10 "$limit" $PY benchmarks/gpu/collect.py "$TMPD" "$@" > "$TMPD/collect.log" 2>&1; rc=$?
      ms=$(( ($(date +%s%N) - t0) / 1000000 ))
      for a in "${names[@]}"; do
          [ -s "$TMPD/$a.rc" ] || echo "$rc $ms" > "$TMPD/$a.rc"
          [ -s "$TMPD/$a.log" ] || cp "$TMPD/collect.log" "$TMPD/$a.log"
      done ) &
    BG+=("${names[@]}")
}
wait_steps() {  # each background step's output into the log, in the order they were started
    wait
    local name rc ms secs status
    for name in "${BG[@]}"; do
        read -r rc ms < "$TMPD/$name.rc" || { rc=1; ms=0; }
        secs=$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))
        status=pass
        [ "$rc" != 0 ] && status=fail
        [ "$rc" = 124 ] || [ "$rc" = 137 ] && status="fail: timed out"
        log ""; log "=== $name (ran in the background)"
        cat "$TMPD/$name.log" >> "$LOG"
        tail -n 25 "$TMPD/$name.log"
        log "=== $name: $status (rc $rc, ${secs}s)"
        printf '%s\t%s\t%s\t%s\n' "$name" "$status" "$rc" "$secs" >> "$RESULTS"
    done
    BG=()
}
skip() {  # skip NAME WHY
    log ""; log "=== $1: skipped: $2"
    printf '%s\t%s\t%s\t%s\n' "$1" "skipped: $2" "" "0" >> "$RESULTS"
}

T0=$(date +%s)
log "tuitrain GPU run (issue 39) $(date -u +%Y-%m-%dT%H:%M:%SZ), mode: $([ $CPU = 1 ] && echo cpu || echo cuda)"
log "checkout: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?') $(git -C "$ROOT" status --porcelain 2>/dev/null | wc -l) changed files"

# --- 1. the device and versions
{
    uname -a; nproc
    command -v nvidia-smi >/dev/null && nvidia-smi || echo "nvidia-smi: not here"
    # one Python for the versions, whether CUDA is here ($TMPD/have_cuda) and torch's line of the report
    # ($TMPD/torch.json): torch is imported once, not three times
    $PY - "$TMPD" <<'PYEOF'
import json, re, sys, torch
from importlib.metadata import distributions
from pathlib import Path
tmpd = Path(sys.argv[1])
available = torch.cuda.is_available()
(tmpd / "have_cuda").write_text(str(int(available)))
seen = {"torch": torch.__version__, "cuda": torch.version.cuda}
if available:
    seen["device"] = torch.cuda.get_device_name(0)
(tmpd / "torch.json").write_text(json.dumps(seen))
print("python", sys.version.split()[0], sys.executable)
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", available)
if available:
    p = torch.cuda.get_device_properties(0)
    print("device", torch.cuda.get_device_name(0), "capability", torch.cuda.get_device_capability(0),
          f"memory {p.total_memory / 2**30:.1f} GiB", "SMs", p.multi_processor_count,
          "bf16", torch.cuda.is_bf16_supported())
# what `pip list` says of these (the same metadata, read here): textual 8.2.8 needs rich>=14.2,
# pygments>=2.19.2, markdown-it-py>=2.1, typing-extensions>=4.4 (not carried)
wanted = {"rich", "pygments", "markdown-it-py", "mdurl", "typing-extensions", "nvidia-ml-py", "lightning",
          "pytorch-lightning", "transformers", "numpy", "psutil", "pytest"}
found = {}
for d in distributions():
    name = d.metadata["Name"] or ""
    key = re.sub(r"[-_.]+", "-", name).lower()
    if key in wanted:
        found.setdefault(key, f"{name:<24} {d.version}")  # the first on sys.path, as pip's
for key in sorted(found):
    print(found[key])
PYEOF
} 2>&1 | tee -a "$LOG"
HAVE_CUDA=$(cat "$TMPD/have_cuda" 2>/dev/null || echo 0)
if [ $CPU = 0 ] && [ "$HAVE_CUDA" != 1 ]; then
    log "no CUDA device, and --cpu not given"; printf '%s\t%s\t%s\t%s\n' cuda-device fail 1 0 >> "$RESULTS"
fi

# --- 2. the carried wheels (here, on --cpu, the same install into a scratch folder)
# On --cpu here (Python 3.11) the cp312 wheels (msgspec) cannot install: only the pure-Python ones are, and
# the local msgspec serves; on the device (Python 3.12) all of them.
WHEELS='.whl/*.whl'
[ $CPU = 1 ] && [ "$($PY -c 'import sys; print(sys.version_info[:2] == (3, 12))')" != True ] && WHEELS='.whl/*-py3-none-any.whl'
if [ $CPU = 1 ] && ! ls .whl/*.whl >/dev/null 2>&1; then
    skip install-wheels "no .whl here (fetch_wheels.sh); this machine's packages serve"
else
    step install-wheels 30 bash -c "ls .whl/*.whl >/dev/null 2>&1 || { echo 'no .whl/*.whl: run benchmarks/gpu/fetch_wheels.sh and carry .whl'; exit 1; }
    rm -rf '$SITE' && $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target '$SITE' $WHEELS && ls '$SITE'"
fi
export PYTHONPATH="$SITE:$ROOT${PYTHONPATH:+:$PYTHONPATH}"
IMPORTS="
import textual, plotext, msgspec, rich, tuitrain.dashboard.live, tuitrain.core.learner
from importlib.metadata import version as v
print('textual', v('textual'), textual.__file__); print('plotext', v('plotext'), plotext.__file__); print('msgspec', v('msgspec'), msgspec.__file__); print('rich', v('rich'), rich.__file__)"
# without CUDA (--cpu) the same `python -c "$IMPORTS"` is forked with the steps of 3. (its torch import saved)
if [ "$HAVE_CUDA" = 1 ]; then
    step imports 30 $PY -c "$IMPORTS"
fi

# --- 3. side by side: the CUDA tests, the CPU suite's device tests on cuda, the checks of checks.py
# (on --cpu: the tests collected only, a check that they import and that the selection is not empty)
PYTEST=($PY -m pytest -p no:cacheprovider -q -rs -o addopts=)
# three steps of torch processes side by side on 16 cores: a few threads each, not 16 (no timing here);
# on --cpu one each (OpenMP's idle threads spin: 4 each on 2 cores tripled checks.py's CPU time)
export OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS
# the files with tests on TUITRAIN_TEST_DEVICE (tests/conftest.py's test_device and exact_device
# fixtures): named, not the whole of tests/, whose other files need packages the device lacks (optuna...)
mapfile -t DEVICE_TESTS < <(grep -rlwE 'test_device|exact_device|mark\.device' tests --include='test_*.py' | sort)
log "device tests in: ${DEVICE_TESTS[*]}"
if [ "$HAVE_CUDA" = 1 ]; then
    XDIST=()  # the device has pytest-xdist and 16 cores: 4 workers beside the other two steps
    $PY -c 'import xdist' 2>/dev/null && XDIST=(-n 4)
    step_bg pytest-cuda $T_TESTS "${PYTEST[@]}" -m cuda tests/cuda
    step_bg pytest-device $T_TESTS env TUITRAIN_TEST_DEVICE=cuda "${PYTEST[@]}" "${XDIST[@]}" -m device "${DEVICE_TESTS[@]}"
    step_bg checks $T_TESTS $PY benchmarks/gpu/checks.py --device $DEV --out "$OUT"
else  # no CUDA (--cpu): each step a process of its own, all forked by collect.py from one Python that imported
      # torch once (issue 53: not five imports of it): the imports, the tests collected (`python -m pytest
      # --collect-only ...`), checks.py, and the benchmark, beside them here (on a CPU its clock judges
      # nothing), its contenders forked in turn (--fork); one timeout for all
    collect_bg $((T_TESTS + T_BENCH)) imports -c "$IMPORTS" \
        ::: pytest-cuda-collect "${PYTEST[@]:3}" --collect-only -m cuda tests/cuda \
        ::: pytest-device-collect "${PYTEST[@]:3}" --collect-only -m device "${DEVICE_TESTS[@]}" \
        ::: checks benchmarks/gpu/checks.py --device $DEV --out "$OUT" \
        ::: bench-gpu benchmarks/bench_gpu.py "${BENCH[@]}"
fi
wait_steps
unset OMP_NUM_THREADS MKL_NUM_THREADS
[ "$HAVE_CUDA" = 1 ] || skip pytest-cuda "no CUDA"; [ "$HAVE_CUDA" = 1 ] || skip pytest-device "no CUDA"

# --- 4. alone, for its clock: hand-written / headless / dashboard rounds, compile, tflops/mfu, max_memory
if [ "$HAVE_CUDA" = 1 ]; then  # (without CUDA it ran in 3.)
    step bench-gpu $T_BENCH $PY benchmarks/bench_gpu.py "${BENCH[@]}"
fi

# --- the report
TOTAL=$(( $(date +%s) - T0 ))
$PY - "$RESULTS" "$OUT" "$CPU" "$TOTAL" "$TMPD" <<'PYEOF' 2>&1 | tee -a "$LOG"
import json, sys, platform
from pathlib import Path
results, out, cpu, total, tmpd = sys.argv[1], Path(sys.argv[2]), sys.argv[3] == "1", int(sys.argv[4]), sys.argv[5]
steps = []
for line in Path(results).read_text().splitlines():
    name, status, rc, secs = line.split("\t")
    steps.append({"step": name, "status": status, "rc": int(rc) if rc else None, "seconds": round(float(secs), 1)})
report = {"mode": "cpu" if cpu else "cuda", "seconds": total, "python": platform.python_version(), "steps": steps}
try:  # what the versions step read of torch (torch is not imported again for it)
    report.update(json.loads((Path(tmpd) / "torch.json").read_text()))
except Exception as e:
    report["torch"] = f"? {e}"
for name in ("checks", "bench"):  # what checks.py and bench_gpu.py wrote (bench: figures and goals)
    f = out / f"{name}.json"
    if f.exists():
        report[name] = json.loads(f.read_text())
if "bench" in report:
    report["goals"] = report["bench"].get("goals", {})
report["failed"] = [s["step"] for s in steps if s["status"].startswith("fail")]
report["ok"] = not report["failed"]
(out / "report.json").write_text(json.dumps(report, indent=1))
print("\n=== summary")
for s in steps:
    print(f"{s['step']:22} {s['status']:18} {s['seconds']:7.1f}s")
for name, g in report.get("goals", {}).items():
    v = g.get("value")
    print(f"goal {name:24} {f'{v:.3f}' if isinstance(v, float) else str(v):>10} target {g.get('target')!s:10} "
          f"met {g.get('met')}")
print(f"total {total}s; {'all passed' if report['ok'] else 'FAILED: ' + ', '.join(report['failed'])}")
PYEOF
rm -rf "$RESULTS" "$TMPD"
[ -f "$OUT/report.json" ] && $PY -c "import json,sys; sys.exit(0 if json.load(open('$OUT/report.json'))['ok'] else 1)"
