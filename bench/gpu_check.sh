#!/usr/bin/env bash
# gpu_check.sh: the local agent on real GPUs (NVML), under 9 minutes.
#
# Starts `gpuplan agent` on NVML with sharing on, in a private GPUPLAN_HOME, submits 10 PyTorch jobs of
# different memory sizes (fractions of the GPU's memory) that share the GPU(s), waits for them, and
# prints per job the declared and measured memory, the mean utilization, the wall time, and the
# makespan; then the same as JSON. Then the suspend check (about 1.5 minutes; GPU_CHECK_SUSPEND=0 skips
# it): the agent again under `las` with a 5 GPU-second quantum; a job holding a working set is suspended
# (SIGSTOP) for a newcomer, and the GPU memory NVML shows for it while it is stopped is compared with
# what the scheduler books for it (the claim of docs/agent.md, "Preemption", that a stopped CUDA process
# keeps its memory). Needs: nvidia-smi, a CUDA build of PyTorch, gpuplan installed.
#
#   bash bench/gpu_check.sh                 # uses .venv/bin/python when present, else python3
#   PYTHON=/path/to/python bash bench/gpu_check.sh
#   GPU_CHECK_DRY=1 bash bench/gpu_check.sh # no GPU: the fake device set and `sleep` jobs (checks the script)
set -euo pipefail
DRY="${GPU_CHECK_DRY:-0}"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  if [ -x "$ROOT/.venv/bin/python" ]; then PY="$ROOT/.venv/bin/python"; else PY="$(command -v python3 || true)"; fi
fi
say() { printf 'gpu_check: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

# -- checks, each with the fix -------------------------------------------------------------------
[ -n "$PY" ] && [ -x "$PY" ] || die "no python3 found; set PYTHON=/path/to/python"
"$PY" -c "import gpuplan" 2>/dev/null || die "gpuplan is not installed for $PY: run 'make venv' in $ROOT (or pip install -e $ROOT)"
if [ "$DRY" = 1 ]; then
  BACKEND="fake:1xH200-141GB"; GPU_MEM_GB=141; NGPUS=1
  say "dry run: fake device set, sleep jobs (nothing here touches a GPU)"
else
  command -v nvidia-smi >/dev/null || die "nvidia-smi not found: this script needs an NVIDIA GPU machine with the driver installed (GPU_CHECK_DRY=1 checks the script without one)"
  nvidia-smi -L >/dev/null 2>&1 || die "nvidia-smi fails ($(nvidia-smi -L 2>&1 | head -1)); is the driver loaded?"
  "$PY" -c "import pynvml" 2>/dev/null || die "nvidia-ml-py is missing for $PY: pip install nvidia-ml-py"
  "$PY" -c "import torch" 2>/dev/null || die "PyTorch is missing for $PY: pip install torch (a CUDA build, see pytorch.org)"
  "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" \
    || die "PyTorch cannot see a GPU (torch.cuda.is_available() is False): install a CUDA build of torch matching the driver"
  BACKEND=nvml
  GPU_MEM_GB="$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1 | awk '{printf "%.1f", $1/1024}')"
  NGPUS="$(nvidia-smi -L | wc -l)"
  say "$NGPUS GPU(s), $GPU_MEM_GB GiB each ($(nvidia-smi --query-gpu=name --format=csv,noheader | head -1))"
fi

export GPUPLAN_HOME="$(mktemp -d "${TMPDIR:-/tmp}/gpuplan-gpu-check.XXXXXX")"
GP=("$PY" -m gpuplan.cli)
cleanup() {
  "${GP[@]}" agent stop --kill-jobs >/dev/null 2>&1 || true
  say "state kept in $GPUPLAN_HOME (history.jsonl, agent.db, jobs/*/stderr)"
}
trap cleanup EXIT

# -- the job: allocate MEM GiB, multiply matrices for SECONDS ---------------------------------------
JOB="$GPUPLAN_HOME/job.py"
cat > "$JOB" <<'EOF'
import os, sys, time
import torch

mem_gb, seconds = float(sys.argv[1]), float(sys.argv[2])
dev = torch.device("cuda")
hold = torch.empty(int(mem_gb * 2**30), dtype=torch.uint8, device=dev)  # the job's working set
a = torch.randn(4096, 4096, device=dev)
b = torch.randn(4096, 4096, device=dev)
t0, iters = time.time(), 0
while time.time() - t0 < seconds:
    c = a @ b
    iters += 1
    if iters % 20 == 0:
        torch.cuda.synchronize()
torch.cuda.synchronize()
print(f"iters={iters} allocated_peak_gb={torch.cuda.max_memory_allocated() / 2**30:.2f} "
      f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')}")
EOF

if [ "$DRY" = 1 ]; then printf 'import sys, time\ntime.sleep(float(sys.argv[2]) / 10)\n' > "$JOB"; fi
"${GP[@]}" agent start --gpus "$BACKEND" --sharing --policy sjf --backfill easy --sample-interval 0.5 --grace 5 --json > "$GPUPLAN_HOME/start.json" \
  || die "the agent did not start: $(tail -3 "$GPUPLAN_HOME/agent.log" 2>/dev/null)"
say "agent started: $("$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); print('pid', d['pid'], '·', len(d['gpus']), 'GPU(s)')" "$GPUPLAN_HOME/start.json")"

# 10 jobs: working set as a fraction of one GPU, seconds of compute; declared = working set + 1.5 GiB
# (CUDA context and cuBLAS workspace); the last one declares twice what it uses (measured < declared).
FRACTIONS=(0.05 0.08 0.10 0.12 0.15 0.18 0.20 0.25 0.30 0.04)
SECONDS_LIST=(40 30 45 25 35 30 40 25 30 20)
for i in "${!FRACTIONS[@]}"; do
  ws="$("$PY" -c "print(round(${FRACTIONS[$i]} * $GPU_MEM_GB, 1))")"
  declared="$("$PY" -c "print(round($ws + 1.5, 1))")"
  [ "$i" = 9 ] && declared="$("$PY" -c "print(round(2 * ($ws + 1.5), 1))")"
  "${GP[@]}" submit --mem "${declared}G" --time 4m --name "torch-$i" --json -- "$PY" "$JOB" "$ws" "${SECONDS_LIST[$i]}" > /dev/null \
    || die "submit failed for job $i"
done
say "submitted ${#FRACTIONS[@]} jobs; waiting (at most 6 minutes)"

deadline=$(( $(date +%s) + 360 ))
while :; do
  left="$("${GP[@]}" queue --json | "$PY" -c "import json,sys; print(len(json.load(sys.stdin)['jobs']))")"
  [ "$left" = 0 ] && break
  if [ "$(date +%s)" -gt "$deadline" ]; then say "still $left job(s) after 6 minutes; reporting what ended"; break; fi
  sleep 2
done

# -- the report ------------------------------------------------------------------------------------
"$PY" - "$GPUPLAN_HOME" <<'EOF'
import json, sys
from pathlib import Path
from gpuplan.agent.store import connect, jobs_by_state, job_profile

home = Path(sys.argv[1])
conn = connect(home / "agent.db", readonly=True)
rows, out = jobs_by_state(conn), []
print(f"{'id':>3} {'name':10} {'state':9} {'gpus':>4} {'on':6} {'declared GB':>11} {'measured GB':>11} {'util %':>6} {'wall s':>7} {'attempt':>7}")
for r in rows:
    p = job_profile(conn, r.id)
    wall = (r.end_s - r.start_s) if r.start_s and r.end_s else None
    rec = {"id": r.id, "name": r.name, "state": r.state, "gpus": r.gpus, "gpu_ids": list(r.gpu_list),
           "declared_gb": r.declared_mem_gb, "booked_gb": r.mem_gb, "measured_peak_gb": p.max_peak_mem_gb,
           "mean_util_pct": p.mean_util_pct, "wall_s": wall, "attempt": r.attempt, "samples": p.samples,
           "reason": r.reason}
    out.append(rec)
    f = lambda v, d=1: "-" if v is None else f"{v:.{d}f}"
    print(f"{r.id:>3} {r.name:10} {r.state:9} {r.gpus:>4} {r.gpu_ids:6} {f(r.declared_mem_gb):>11} "
          f"{f(p.max_peak_mem_gb):>11} {f(p.mean_util_pct, 0):>6} {f(wall):>7} {r.attempt:>7}")
starts = [r.start_s for r in rows if r.start_s]
ends = [r.end_s for r in rows if r.end_s]
makespan = (max(ends) - min(r.submit_s for r in rows)) if ends else None
peak_gpu = conn.execute("SELECT gpu, MAX(mem_used_gb), AVG(util_pct) FROM gpu_samples GROUP BY gpu").fetchall()
print(f"makespan: {makespan:.1f} s (first submit to last end)" if makespan else "makespan: -")
for g, used, util in peak_gpu:
    print(f"GPU {g}: peak used {used if used is None else round(used, 1)} GB, mean util {util if util is None else round(util)} %")
if rows and all(o["measured_peak_gb"] is None for o in out):
    print("note: no per-job memory was measured: NVML reports no processes here, or reports pids from another "
          "pid namespace (a container); per-GPU figures above are still real")
print(json.dumps({"makespan_s": makespan, "jobs": out}, indent=1))
EOF

# -- the suspend check: a stopped CUDA process keeps its GPU memory (docs/agent.md, "Preemption") ------
[ "${GPU_CHECK_SUSPEND:-1}" = 1 ] || exit 0
"${GP[@]}" agent stop --kill-jobs >/dev/null 2>&1 || true
export GPUPLAN_HOME="$GPUPLAN_HOME/suspend"
QUANTUM=5; [ "$DRY" = 1 ] && QUANTUM=1
"${GP[@]}" agent start --gpus "$BACKEND" --exclusive --policy las --quantum-gpu-s "$QUANTUM" --sample-interval 0.5 --grace 5 --json > /dev/null \
  || die "the las agent did not start: $(tail -3 "$GPUPLAN_HOME/agent.log" 2>/dev/null)"
WS="$("$PY" -c "print(round(0.2 * $GPU_MEM_GB, 1))")"; SMALL="$("$PY" -c "print(round(0.05 * $GPU_MEM_GB, 1))")"
A="$("${GP[@]}" submit --mem "$("$PY" -c "print($WS + 1.5)")G" --preempt suspend --name held-long --json -- "$PY" "$JOB" "$WS" 90 | "$PY" -c "import json,sys; print(json.load(sys.stdin)['id'])")"
attained() { "${GP[@]}" show "$1" --json | "$PY" -c "import json,sys; j=json.load(sys.stdin)['job']; print(j['state'], j.get('attained_gpu_s') or 0)"; }
deadline=$(( $(date +%s) + 60 ))
until "$PY" -c "import sys; s, a = sys.argv[1], float(sys.argv[2]); sys.exit(0 if s == 'running' and a > 2 * $QUANTUM else 1)" $(attained "$A"); do
  [ "$(date +%s)" -lt "$deadline" ] || die "job $A did not run for two quanta within a minute: $(attained "$A")"
  sleep 1
done
C="$("${GP[@]}" submit --mem "$("$PY" -c "print($SMALL + 1.5)")G" --preempt never --name newcomer --json -- "$PY" "$JOB" "$SMALL" 20 | "$PY" -c "import json,sys; print(json.load(sys.stdin)['id'])")"
say "suspend check: job $A holds ${WS} GiB; newcomer $C; waiting for both to end (at most 3 minutes)"
deadline=$(( $(date +%s) + 180 ))
until [ "$("${GP[@]}" queue --json | "$PY" -c "import json,sys; print(len(json.load(sys.stdin)['jobs']))")" = 0 ]; do
  [ "$(date +%s)" -lt "$deadline" ] || { say "jobs still queued after 3 minutes; reporting what happened"; break; }
  sleep 2
done
"$PY" - "$GPUPLAN_HOME" "$A" "$C" <<'EOF'
import json, sys
from pathlib import Path
from gpuplan.agent.store import connect

home, a, c = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
conn = connect(home / "agent.db", readonly=True)
events = conn.execute("SELECT t_s, action, job_id FROM events WHERE uid = -1 ORDER BY t_s").fetchall()
stop = next((t for t, act, j in events if j == a and act == "preempt:suspend"), None)
back = next((t for t, act, j in events if j == a and act == "resume" and stop is not None and t > stop), None)
def mem(lo, hi):
    rows = conn.execute("SELECT MAX(mem_gb), AVG(util_pct), COUNT(*) FROM job_samples WHERE job_id = ? AND t_s > ? AND t_s < ?",
                        (a, lo, hi)).fetchone()
    return {"max_mem_gb": rows[0], "mean_util_pct": rows[1], "samples": rows[2]}
booked = conn.execute("SELECT mem_gb, state, preemptions, suspended_s FROM jobs WHERE id = ?", (a,)).fetchone()
c_start = conn.execute("SELECT start_s FROM jobs WHERE id = ?", (c,)).fetchone()[0]
out = {
    "suspended_at_s": stop, "resumed_at_s": back, "booked_gb": booked[0], "final_state": booked[1],
    "preemptions": booked[2], "suspended_s": booked[3],
    "before": mem(0.0, stop) if stop else None,
    "while_suspended": mem(stop, back if back else float("inf")) if stop else None,
    "newcomer_started_while_suspended": bool(stop and c_start and stop <= c_start and (back is None or c_start < back)),
}
w = out["while_suspended"]
kept = w and w["max_mem_gb"] is not None
print("suspend check:", "job suspended and resumed" if stop and back else "NO suspension seen (see events)")
if kept:
    print(f"  memory while stopped: {w['max_mem_gb']:.1f} GB (booked {booked[0]:.1f} GB per GPU), util {w['mean_util_pct']:.0f} %")
else:
    print("  no per-process memory while stopped (NVML lists no stopped process, or another pid namespace)")
print(json.dumps({"suspend_check": out}, indent=1))
EOF
