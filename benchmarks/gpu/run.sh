#!/usr/bin/env bash
# Issue 39: every prepared CUDA check and benchmark in ONE device call (see benchmarks/gpu/README.md).
#
#   bash benchmarks/gpu/run.sh          # on the GPU machine, with .whl carried (fetch_wheels.sh)
#   bash benchmarks/gpu/run.sh --cpu    # the same steps here, small, CUDA-only parts "skipped: no CUDA"
#
# Writes $OUT/report.json, $OUT/run.log and $OUT/checks.json ($OUT defaults to ./gpu-out); exits
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
SITE=/tmp/tuitrain-site

if [ $CPU = 1 ]; then
    # bench_gpu.py --small; a tiny pair count (a check of the script, no figure). bench_gpu.py reads its
    # clock at the MetricsLogged of steps warmup and warmup+steps: both must be multiples of 10
    BENCH=(--device cpu --small --repeats 2 --steps 20 --warmup 10); DEV=cpu
    T_PYTEST=120; T_BENCH=150; T_CHECKS=120
else
    # nanoGPT-sized GPT in bf16, 4 alternating pairs (12 processes would not fit the 8 minutes)
    BENCH=(--device cuda --repeats 4 --steps 150 --warmup 30); DEV=cuda
    T_PYTEST=150; T_BENCH=210; T_CHECKS=90  # with installs and imports 60: 510 s
fi

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
    $PY - <<'PYEOF'
import sys, torch
print("python", sys.version.split()[0], sys.executable)
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print("device", torch.cuda.get_device_name(0), "capability", torch.cuda.get_device_capability(0),
          f"memory {p.total_memory / 2**30:.1f} GiB", "SMs", p.multi_processor_count,
          "bf16", torch.cuda.is_bf16_supported())
PYEOF
    # textual 8.2.8 needs rich>=14.2, pygments>=2.19.2, markdown-it-py>=2.1, typing-extensions>=4.4 (not carried)
    $PY -m pip list 2>/dev/null | grep -iE '^(rich|pygments|markdown-it-py|mdurl|typing.extensions|nvidia-ml-py|lightning|pytorch-lightning|transformers|numpy|psutil|pytest) ' || true
} 2>&1 | tee -a "$LOG"
HAVE_CUDA=$($PY -c 'import torch; print(int(torch.cuda.is_available()))' 2>/dev/null || echo 0)
if [ $CPU = 0 ] && [ "$HAVE_CUDA" != 1 ]; then
    log "no CUDA device, and --cpu not given"; printf '%s\t%s\t%s\t%s\n' cuda-device fail 1 0 >> "$RESULTS"
fi

# --- 2. the carried wheels (here, on --cpu, the same install into a scratch folder)
# On --cpu here (Python 3.11) the cp312 wheels (msgspec) cannot install: only the pure-Python ones are, and
# the local msgspec serves; on the device (Python 3.12) all of them.
WHEELS='.whl/*.whl'
[ $CPU = 1 ] && [ "$($PY -c 'import sys; print(sys.version_info[:2] == (3, 12))')" != True ] && WHEELS='.whl/*-py3-none-any.whl'
step install-wheels 30 bash -c "ls .whl/*.whl >/dev/null 2>&1 || { echo 'no .whl/*.whl: run benchmarks/gpu/fetch_wheels.sh and carry .whl'; exit 1; }
    rm -rf '$SITE' && $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target '$SITE' $WHEELS && ls '$SITE'"
export PYTHONPATH="$SITE:$ROOT${PYTHONPATH:+:$PYTHONPATH}"
step imports 30 $PY -c "
import textual, plotext, msgspec, rich, tuitrain.dashboard.live, tuitrain.core.learner
from importlib.metadata import version as v
print('textual', v('textual'), textual.__file__); print('plotext', v('plotext'), plotext.__file__); print('msgspec', v('msgspec'), msgspec.__file__); print('rich', v('rich'), rich.__file__)"

# --- 3. the CUDA tests (on --cpu collected and skipped: a check that they still import)
if [ "$HAVE_CUDA" = 1 ]; then
    step pytest-cuda $T_PYTEST $PY -m pytest -m cuda tests/cuda -p no:cacheprovider -q -rs
else
    step pytest-cuda-collect $T_PYTEST $PY -m pytest -m cuda tests/cuda -p no:cacheprovider -q -rs
    skip pytest-cuda "no CUDA"
fi

# --- 4. the benchmark: tuitrain headless against the hand-written loop, tflops/mfu, max_memory
step bench-gpu $T_BENCH $PY benchmarks/bench_gpu.py "${BENCH[@]}"

# --- 5. no syncs on unlogged steps under set_sync_debug_mode("error"); GPU fields in DevicesSampled
step checks $T_CHECKS $PY benchmarks/gpu/checks.py --device $DEV --out "$OUT"
[ "$HAVE_CUDA" = 1 ] || { skip sync-debug-mode "no CUDA"; skip devices-gpu-fields "no CUDA"; }

# --- the report
TOTAL=$(( $(date +%s) - T0 ))
$PY - "$RESULTS" "$OUT" "$CPU" "$TOTAL" <<'PYEOF' 2>&1 | tee -a "$LOG"
import json, sys, platform
from pathlib import Path
results, out, cpu, total = sys.argv[1], Path(sys.argv[2]), sys.argv[3] == "1", int(sys.argv[4])
steps = []
for line in Path(results).read_text().splitlines():
    name, status, rc, secs = line.split("\t")
    steps.append({"step": name, "status": status, "rc": int(rc) if rc else None, "seconds": round(float(secs), 1)})
report = {"mode": "cpu" if cpu else "cuda", "seconds": total, "python": platform.python_version(), "steps": steps}
try:
    import torch
    report["torch"], report["cuda"] = torch.__version__, torch.version.cuda
    if torch.cuda.is_available():
        report["device"] = torch.cuda.get_device_name(0)
except Exception as e:
    report["torch"] = f"? {e}"
checks = out / "checks.json"
if checks.exists():
    report["checks"] = json.loads(checks.read_text())
report["failed"] = [s["step"] for s in steps if s["status"].startswith("fail")]
report["ok"] = not report["failed"]
(out / "report.json").write_text(json.dumps(report, indent=1))
print("\n=== summary")
for s in steps:
    print(f"{s['step']:22} {s['status']:18} {s['seconds']:7.1f}s")
print(f"total {total}s; {'all passed' if report['ok'] else 'FAILED: ' + ', '.join(report['failed'])}")
PYEOF
rm -f "$RESULTS"
[ -f "$OUT/report.json" ] && $PY -c "import json,sys; sys.exit(0 if json.load(open('$OUT/report.json'))['ok'] else 1)"
