#!/usr/bin/env bash
# benchmarks/gpu_check.sh: every GPU target of prism-plugin measured in one run of under 8 minutes.
#
#   bash benchmarks/gpu_check.sh                 # on a CUDA machine (the figures for BENCHMARKS.md)
#   bash benchmarks/gpu_check.sh --cpu-smoke     # tiny sizes on the CPU: checks this script's logic (~1 min)
#
# Options: --json FILE (also write the summary there; default "$OUT/gpu_check.json" when $OUT is set),
# --budget SECONDS (whole run, default 470), --grid-scale S (default 0.5), --tiles N and --batch N (extraction,
# default 8192 and 128), --smoke-workers N (with --cpu-smoke: also the 1-vs-N workers comparison, N CPU processes).
#
# What it measures (targets from issues 17 and 27), each under its own `timeout`, with its elapsed seconds:
#   (a) grid: fast mode (`probe.backend: fast`, on the GPU) against the reference loop (scikit-learn, one
#       thread), `bench_grid.py --variants reference,fast --datasets pcam --threads 1`, PCam-sized data at
#       --grid-scale (default 0.5: 131,072 x 1,536 train; the full size's reference loop alone takes
#       ~150 s in regime A), once in regime A and once in regime B. Target: fast >= 20x the reference.
#   (b) extraction: H-optimus-0's architecture (ViT-g/14 + 4 registers, 1.1B parameters, the adapter's
#       own fp16 autocast; random weights, nothing downloaded) through the full pipeline (PNG decode,
#       preprocessing in DataLoader workers, forward, L2, cached shards) and a bare forward under the
#       same autocast, `bench_extract.py --model h_optimus_0 --n 8192 --batch 128 --repeat 2` (the default
#       DataLoader workers, min(4, CPUs - 1), as prism-run uses). Targets: pipeline
#       >= 700 tiles/s, pipeline / bare >= 0.9.
#   (c) `--extract-workers` across GPUs: with N >= 2 GPUs, 1 worker against N (byte-identical
#       features.npy, speed-up); with one GPU there is nothing to compare (one worker is the in-process
#       path), so the check is skipped with a line saying so.
# At the end: one table (figure, target, PASS / FAIL / ERROR / SKIP) and the same as JSON.
# Exit status: 0 every check ran and met its target (--cpu-smoke: every check ran), 1 a target missed
# or a check failed or timed out, 2 bad usage or no CUDA GPU, 3 the environment could not be set up.
#
# The device machine of this workplace (read from /work/.library/device/README.md, KINDS.md, H200.md):
#   * kind nvidia-h200: one NVIDIA H200 (about 139 GiB), 16 CPU cores, 128 GiB RAM, 64 GiB disk, x86-64;
#     commands run as root; NOTHING outside it can be reached (no package index, no model hub), so
#     every model here has random weights.
#   * it gets a copy of the working tree (tracked + untracked-not-ignored files; up to 8 ignored paths
#     via `carry`, 64 MiB in all): a virtual environment cannot travel.
#   * its `python3` (Python 3.12, /opt/torch/.venv) holds torch 2.11 + CUDA 13, torchvision, timm,
#     numpy, scipy, pandas, scikit-learn, pillow, pyyaml, pluggy, filelock, tqdm, threadpoolctl and
#     matplotlib (KINDS.md's package list, 2026-11-17), but not prism_plugin: this script installs the
#     checkout into a private folder with `pip install --no-deps --no-build-isolation --no-index
#     --target` (offline) and puts it on PYTHONPATH. If python3 has no CUDA torch it tries a fresh venv
#     and `pip install -e .`, which needs a package index; failing that it prints what it could not do
#     and exits 3 with one line.
#   * what the command writes under $OUT comes back (at most 8 files, 16 MiB each): gpu_check.json and
#     one log per step (gpu_check_<step>.log).
#   * device time: 15 minutes per session, all tries together, the machine's start (a minute or more)
#     included; one command at most 10 minutes. So: one call, e.g. the device tool's
#     run(command="bash benchmarks/gpu_check.sh", timeout_s=540), then give_back.
set -u

MODE=gpu
JSON_PATH=""
BUDGET=470
GRID_SCALE=0.5
TILES=8192
BATCH=128
SMOKE_WORKERS=0

usage() { sed -n '2,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
die_usage() { echo "gpu_check: $1" >&2; exit 2; }
is_number() { [[ "$1" =~ ^[0-9]+([.][0-9]+)?$ ]]; }

while [ $# -gt 0 ]; do
  case "$1" in
    --cpu-smoke) MODE=smoke ;;
    --json) [ $# -ge 2 ] || die_usage "--json needs a file name, e.g. --json /tmp/gpu_check.json"; JSON_PATH=$2; shift ;;
    --budget) [ $# -ge 2 ] && [[ "$2" =~ ^[0-9]+$ ]] || die_usage "--budget needs whole seconds, e.g. --budget 470"; BUDGET=$2; shift ;;
    --grid-scale) [ $# -ge 2 ] && is_number "$2" || die_usage "--grid-scale needs a number in (0, 1], e.g. --grid-scale 0.5"; GRID_SCALE=$2; shift ;;
    --tiles) [ $# -ge 2 ] && [[ "$2" =~ ^[1-9][0-9]*$ ]] || die_usage "--tiles needs a positive count, e.g. --tiles 8192"; TILES=$2; shift ;;
    --batch) [ $# -ge 2 ] && [[ "$2" =~ ^[1-9][0-9]*$ ]] || die_usage "--batch needs a positive count, e.g. --batch 128"; BATCH=$2; shift ;;
    --smoke-workers) [ $# -ge 2 ] && [[ "$2" =~ ^[2-9]$ ]] || die_usage "--smoke-workers needs a count from 2 to 9"; SMOKE_WORKERS=$2; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die_usage "unknown argument '$1'; see --help (e.g. bash benchmarks/gpu_check.sh --cpu-smoke)" ;;
  esac
  shift
done
if [ -z "$JSON_PATH" ] && [ -n "${OUT:-}" ]; then JSON_PATH="$OUT/gpu_check.json"; fi

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/prism-gpu-check.XXXXXX") || { echo "gpu_check: cannot create a folder under ${TMPDIR:-/tmp}" >&2; exit 3; }
LOGDIR=${OUT:-$WORK}
mkdir -p "$LOGDIR" || { echo "gpu_check: cannot write to $LOGDIR" >&2; exit 3; }
RECORDS="$WORK/records.jsonl"
: > "$RECORDS"
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
T_START=$(date +%s)
cd "$REPO" || exit 3

# ------------------------------------------------------------------ the summary helper (plain Python, json only)
cat > "$WORK/gpu_check_lib.py" <<'PYEOF'
"""Reads the benchmarks' JSON files into one record per figure; prints the summary table and writes its JSON."""
import datetime
import json
import math
import os
import sys

STATUSES = ("PASS", "FAIL", "ERROR", "SKIP", "SMOKE", "INFO")


def record(path, **rec):
    rec.setdefault("detail", "")
    with open(path, "a") as fh:
        fh.write(json.dumps(rec) + "\n")


def judge(value, target, mode):
    """PASS / FAIL against '>= x' (a smoke run's sizes say nothing about the targets: SMOKE)."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "ERROR"
    if target is None:
        return "INFO"
    if mode == "smoke":
        return "SMOKE"
    return "PASS" if value >= target else "FAIL"


def load(path):
    with open(path) as fh:
        return json.load(fh)


def grid(records, mode, src, check, seconds, regime, scale):
    rep = load(src)
    fast = ref = None
    for tag, ds in rep.get("datasets", {}).items():
        if tag.endswith("-" + regime) or ds.get("data", {}).get("regime") == regime:
            summary, variants = ds.get("summary", {}), ds.get("variants", {})
            fast, ref = variants.get("fast"), variants.get("reference")
            ratio = summary.get("fast", {}).get("speedup_vs_reference")
            diffs = summary.get("fast", {}).get("column_diffs", {})
            n_train = ds.get("data", {}).get("n_train")
            break
    if fast is None or ref is None:
        return record(records, check=check, figure=f"fast / reference loop, regime {regime}", value=None,
                      unit="x", target=20.0, status="ERROR", seconds=seconds,
                      detail=f"{src}: no fast and reference results for regime {regime}")
    if ratio is None:
        ratio = ref["seconds"] / fast["seconds"]
    on = "GPU" if fast.get("cuda") else "CPU (no CUDA device)"
    status = judge(ratio, 20.0, mode)
    if mode == "gpu" and not fast.get("cuda"):
        status = "ERROR"
    detail = (f"PCam-sized x{scale} ({n_train} train rows), regime {regime}: reference {ref['seconds']:.1f} s "
              f"(1 thread), fast {fast['seconds']:.1f} s on {on}; max |diff| vs reference AUROC "
              f"{diffs.get('auroc', float('nan')):.2g}, ECE {diffs.get('ece_fixed', float('nan')):.2g}")
    record(records, check=check, figure=f"grid fast / reference loop (regime {regime}, PCam x{scale})", value=ratio,
           unit="x", target=20.0, status=status, seconds=seconds, detail=detail)


def extract(records, mode, src, seconds):
    r = load(src)
    where = f"{r['model']} {r['dtype']} on {r.get('device_name') or r['device']}, {r['n']} tiles, batch {r['batch']}, " \
            f"{r['loader_workers']} loader workers, best of {r['repeat']}"
    record(records, check="extract_pipeline", figure="extraction, full pipeline", value=r["pipeline_tiles_per_s"],
           unit="tiles/s", target=700.0, status=judge(r["pipeline_tiles_per_s"], 700.0, mode), seconds=seconds,
           detail=where)
    record(records, check="extract_bare", figure="extraction, bare forward", value=r["bare_tiles_per_s"],
           unit="tiles/s", target=None, status=judge(r["bare_tiles_per_s"], None, mode), seconds=seconds,
           detail=where)
    record(records, check="extract_ratio", figure="extraction, pipeline / bare forward", value=r["ratio"], unit="x",
           target=0.9, status=judge(r["ratio"], 0.9, mode), seconds=seconds,
           detail="per pair: " + ", ".join(f"{x:.3f}" for x in r["ratio_per_pair"]))


def workers(records, mode, src, seconds):
    r = load(src)
    same = bool(r["byte_identical"])
    detail = (f"{r['model']} on {r['device']}, {r['n']} tiles, shard {r['shard']}: 1 worker {r['one_tiles_per_s']:.1f} "
              f"tiles/s, {r['workers']} workers {r['many_tiles_per_s']:.1f} tiles/s")
    record(records, check="workers_identical", figure=f"--extract-workers 1 vs {r['workers']}: byte-identical",
           value=1.0 if same else 0.0, unit="bool", target=1.0,
           status=("PASS" if same else "FAIL") if mode == "gpu" else ("SMOKE" if same else "FAIL"),
           seconds=seconds, detail=detail)
    record(records, check="workers_speedup", figure=f"--extract-workers {r['workers']} / 1 speed-up", value=r["speedup"],
           unit="x", target=None, status="INFO", seconds=seconds, detail=detail)


def fmt(value, unit):
    if value is None:
        return "-"
    if unit == "bool":
        return "yes" if value else "no"
    if unit == "tiles/s":
        return f"{value:.1f} tiles/s"
    return f"{value:.3g}{unit}"


def summary(records, mode, json_path, env_path, total, budget):
    recs = [json.loads(line) for line in open(records) if line.strip()]
    env = load(env_path) if env_path and os.path.exists(env_path) else {}
    print("")
    print(f"== gpu_check summary ({mode}; {env.get('device') or 'no GPU'}; torch {env.get('torch', '?')}; "
          f"{env.get('gpus', 0)} GPU(s); {total:.0f} s of a {budget} s budget)")
    width = max([len(r["figure"]) for r in recs] + [6])
    head = f"{'figure':<{width}}  {'value':>16}  {'target':>9}  {'status':<6}  {'seconds':>7}"
    print(head)
    print("-" * len(head))
    for r in recs:
        target = "-" if r["target"] is None else ("yes" if r["unit"] == "bool" else ">= " + fmt(r["target"], ""))
        print(f"{r['figure']:<{width}}  {fmt(r['value'], r['unit']):>16}  {target:>9}  {r['status']:<6}  "
              f"{r['seconds']:>7.0f}")
    for r in recs:
        if r.get("detail"):
            print(f"  {r['check']}: {r['detail']}")
    counts = {s: sum(r["status"] == s for r in recs) for s in STATUSES}
    bad = counts["FAIL"] + counts["ERROR"]
    verdict = "all targets met" if mode == "gpu" and not bad else ("smoke run complete" if not bad else "NOT OK")
    line = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    payload = {"tool": "benchmarks/gpu_check.sh", "mode": mode,
               "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "environment": env, "total_seconds": round(total, 1), "budget_seconds": budget,
               "verdict": verdict, "counts": counts, "checks": recs}
    if json_path:
        with open(json_path, "w") as fh:
            json.dump(payload, fh, indent=1)
    print(f"gpu_check: {verdict}: {line}" + (f"; json: {json_path}" if json_path else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "grid":
        grid(args[0], args[1], args[2], args[3], float(args[4]), args[5], args[6])
    elif cmd == "extract":
        extract(args[0], args[1], args[2], float(args[3]))
    elif cmd == "workers":
        workers(args[0], args[1], args[2], float(args[3]))
    elif cmd == "record":  # records mode check figure unit target status seconds detail
        record(args[0], check=args[2], figure=args[3], value=None, unit=args[4],
               target=None if args[5] == "-" else float(args[5]), status=args[6], seconds=float(args[7]),
               detail=args[8])
    elif cmd == "summary":
        sys.exit(summary(args[0], args[1], args[2], args[3], float(args[4]), int(args[5])))
    else:
        sys.exit(f"gpu_check_lib: unknown command {cmd}")
PYEOF

LIB="$WORK/gpu_check_lib.py"
elapsed() { echo $(( $(date +%s) - T_START )); }

finish() {  # the table, the JSON, the exit status
  "$PY" "$LIB" summary "$RECORDS" "$MODE" "$JSON_PATH" "$WORK/env.json" "$(elapsed)" "$BUDGET"
  exit $?
}

json_str() { printf '"%s"' "$(printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g')"; }
stop() {  # stop CODE VERDICT MESSAGE: one line, a JSON saying why (no checks ran), exit CODE
  echo "gpu_check: $3" >&2
  if [ -n "$JSON_PATH" ]; then
    printf '{"tool": "benchmarks/gpu_check.sh", "mode": "%s", "verdict": %s, "reason": %s, "checks": []}\n' \
      "$MODE" "$(json_str "$2")" "$(json_str "$3")" > "$JSON_PATH"
  fi
  exit "$1"
}
env_fail() { stop 3 "environment failed" "cannot set up the environment: $1"; }

# ------------------------------------------------------------------ environment
echo "== gpu_check ($MODE): $(date -u +%Y-%m-%dT%H:%M:%SZ), repo $REPO, budget $BUDGET s, logs in $LOGDIR"
SETUP_LOG="$LOGDIR/gpu_check_setup.log"
: > "$SETUP_LOG"
command -v "$PY" >/dev/null 2>&1 || env_fail "no Python interpreter '$PY' (set PYTHON=/path/to/python3)"

probe() {  # writes $WORK/env.json; in gpu mode torch is imported (CUDA check), in smoke mode only looked up
  timeout -k 5 180 "$PY" - "$MODE" "$WORK/env.json" "$REPO" >>"$SETUP_LOG" 2>&1 <<'PYEOF'
import importlib.util, json, os, subprocess, sys
mode, out, repo = sys.argv[1:4]
need = ["numpy", "scipy", "pandas", "sklearn", "pluggy", "yaml", "PIL", "tqdm", "filelock", "threadpoolctl",
        "torch", "torchvision", "timm", "matplotlib"]
info = {"python": sys.executable, "python_version": sys.version.split()[0],
        "missing": [m for m in need if importlib.util.find_spec(m) is None], "cpus": os.cpu_count()}
try:
    commit = subprocess.run(["git", "-C", repo, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            timeout=10).stdout.strip()
except Exception:
    commit = ""
info["commit"] = commit or "unknown"
if "torch" not in info["missing"]:
    if mode == "gpu":
        import torch
        info.update(torch=torch.__version__, torch_cuda=torch.version.cuda, cuda=torch.cuda.is_available(),
                    gpus=torch.cuda.device_count() if torch.cuda.is_available() else 0)
        if info["cuda"]:
            info["device"] = torch.cuda.get_device_name(0)
            info["gpu_memory_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
    else:
        from importlib.metadata import version
        info.update(torch=version("torch"), cuda=False, gpus=0)
spec = importlib.util.find_spec("prism_plugin")
info["prism_plugin"] = os.path.dirname(spec.origin) if spec and spec.origin else None
try:
    info["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                    capture_output=True, text=True, timeout=20).stdout.strip().splitlines()[0]
except Exception:
    info["driver"] = None
json.dump(info, open(out, "w"))
print(json.dumps(info))
PYEOF
}
field() { "$PY" -c 'import json,sys; v=json.load(open(sys.argv[1])).get(sys.argv[2]); print("" if v is None else (",".join(v) if isinstance(v, list) else v))' "$WORK/env.json" "$1"; }

t0=$(date +%s)
probe || env_fail "$PY could not be probed (see $SETUP_LOG)"
if [ "$MODE" = gpu ] && [ "$(field cuda)" != True ]; then
  gpus_seen=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  if [ "${gpus_seen:-0}" = 0 ]; then
    stop 2 "no GPU" "no CUDA GPU visible here (nvidia-smi lists none, $PY's torch sees none); run it on a GPU machine, or use --cpu-smoke"
  fi
  echo "   $PY has no CUDA torch ($(field torch)); nvidia-smi lists $gpus_seen GPU(s): trying a fresh venv + pip install -e ."
  if timeout -k 5 300 bash -c "python3 -m venv '$WORK/venv' && '$WORK/venv/bin/pip' install -q --timeout 10 --retries 0 -e '$REPO'" >>"$SETUP_LOG" 2>&1; then
    PY="$WORK/venv/bin/python"
    probe || env_fail "the new venv's python could not be probed (see $SETUP_LOG)"
  fi
  [ "$(field cuda)" = True ] || env_fail "python3 has no torch with CUDA, and 'pip install -e .' into a fresh venv failed (no package index reachable?); carry wheels (see /work/.library/device/README.md) or use a machine whose python3 holds torch+CUDA; log: $SETUP_LOG"
fi
missing=$(field missing)
[ -z "$missing" ] || env_fail "$PY lacks the Python packages: $missing (pip install them, or carry them as wheels); log: $SETUP_LOG"
case "$(field prism_plugin)" in
  "$REPO"/src/prism_plugin) ;;  # an editable install of this checkout
  *)
    echo "   installing this checkout for $PY (offline: --no-deps --no-index --target $WORK/site)"
    # from a copy: pip builds in the source folder (build/, *.egg-info), which stays clean this way
    mkdir -p "$WORK/pkgsrc" && cp -r "$REPO"/pyproject.toml "$REPO"/README.md "$REPO"/src "$REPO"/model_adapters \
      "$REPO"/tasks "$WORK/pkgsrc/" 2>>"$SETUP_LOG" || env_fail "cannot copy the package sources to $WORK/pkgsrc"
    if ! timeout -k 5 180 "$PY" -m pip install -q --no-deps --no-build-isolation --no-index --no-compile \
        --disable-pip-version-check --target "$WORK/site" "$WORK/pkgsrc" >>"$SETUP_LOG" 2>&1; then
      # no pip / setuptools: the package laid out by links, as pyproject's package-dir maps it (no metadata)
      echo "   pip could not install it (see $SETUP_LOG); linking src/prism_plugin, model_adapters and tasks instead"
      rm -rf "$WORK/site" && mkdir -p "$WORK/site/prism_plugin" || env_fail "cannot write $WORK/site"
      for f in "$REPO"/src/prism_plugin/*; do ln -s "$f" "$WORK/site/prism_plugin/"; done
      ln -s "$REPO/model_adapters" "$WORK/site/prism_plugin/model_adapters"
      ln -s "$REPO/tasks" "$WORK/site/prism_plugin/task_files"
    fi
    export PYTHONPATH="$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
    probe || env_fail "$PY could not be probed after the install (see $SETUP_LOG)"
    case "$(field prism_plugin)" in
      "$WORK/site/prism_plugin") ;;
      *) env_fail "prism_plugin still resolves to '$(field prism_plugin)', not the install in $WORK/site; log: $SETUP_LOG" ;;
    esac
    ;;
esac
GPUS=$(field gpus)
echo "   python $(field python_version) ($PY), torch $(field torch), CUDA $(field cuda), GPUs ${GPUS:-0} $(field device), driver $(field driver), $(field cpus) CPUs, commit $(field commit), prism_plugin from $(field prism_plugin) ($(( $(date +%s) - t0 )) s)"

# ------------------------------------------------------------------ one check under its own timeout
# run_check NAME CAP_SECONDS command...: the command's output goes to $LOGDIR/gpu_check_NAME.log; the timeout is
# CAP or what is left of the budget (less a reserve for the summary); sets CHECK_RC and CHECK_SECONDS.
RESERVE=10
run_check() {
  local name=$1 cap=$2; shift 2
  local left=$(( BUDGET - $(elapsed) - RESERVE ))
  local limit=$(( cap < left ? cap : left ))
  local log="$LOGDIR/gpu_check_$name.log"
  CHECK_SECONDS=0
  if [ "$limit" -lt 15 ]; then
    echo "== [$name] skipped: ${left} s of the budget left"
    CHECK_RC=-1
    return
  fi
  echo "== [$name] (timeout $limit s): $*"
  local t=$(date +%s)
  timeout -k 10 "$limit" "$@" >"$log" 2>&1
  CHECK_RC=$?
  CHECK_SECONDS=$(( $(date +%s) - t ))
  if [ "$CHECK_RC" = 124 ] || [ "$CHECK_RC" = 137 ]; then
    echo "   [$name] TIMED OUT after $CHECK_SECONDS s (limit $limit s); last lines of $log:"
    tail -n 5 "$log" | sed 's/^/   | /'
  elif [ "$CHECK_RC" != 0 ]; then
    echo "   [$name] FAILED (exit $CHECK_RC) after $CHECK_SECONDS s; last lines of $log:"
    tail -n 8 "$log" | sed 's/^/   | /'
  else
    grep -E "tiles/s|ratio|speed-up|byte-identical|^   (reference|fast) |x the reference" "$log" | grep -v "^==" | head -n 8 | sed 's/^/   | /'
    echo "   [$name] done in $CHECK_SECONDS s"
  fi
}
# failed NAME FIGURE UNIT TARGET: the record of a check that produced no figure
# (a check left out for want of budget is an ERROR too: its target stays unmeasured)
failed() {
  local why="exit $CHECK_RC; log: $LOGDIR/gpu_check_${5:-$1}.log"
  if [ "$CHECK_RC" = 124 ] || [ "$CHECK_RC" = 137 ]; then why="timed out; log: $LOGDIR/gpu_check_${5:-$1}.log"; fi
  [ "$CHECK_RC" = -1 ] && why="not run: no budget left (rerun with a larger --budget or smaller sizes)"
  "$PY" "$LIB" record "$RECORDS" "$MODE" "$1" "$2" "$3" "$4" ERROR "$CHECK_SECONDS" "$why"
}

if [ "$MODE" = smoke ]; then
  DEVICE=cpu
  EXTRACT_ARGS=(--model timm:vit_tiny_patch16_224 --model-args img_size=64 --n 32 --batch 16 --repeat 1 --workers 0)
  GRID_ARGS=(--scale 0.005)
  REGIMES=(A)
  CAP_EXTRACT=120; CAP_GRID=120; CAP_WORKERS=120
else
  DEVICE=cuda
  EXTRACT_ARGS=(--model h_optimus_0 --n "$TILES" --batch "$BATCH" --repeat 2)
  GRID_ARGS=(--scale "$GRID_SCALE")
  REGIMES=(A B)
  CAP_EXTRACT=170; CAP_GRID=170; CAP_WORKERS=120
fi

# (b) first: the headline figure, and the cheapest
run_check extract "$CAP_EXTRACT" "$PY" benchmarks/bench_extract.py --device "$DEVICE" "${EXTRACT_ARGS[@]}" --json "$WORK/extract.json"
if [ "$CHECK_RC" = 0 ]; then
  "$PY" "$LIB" extract "$RECORDS" "$MODE" "$WORK/extract.json" "$CHECK_SECONDS" || failed extract_pipeline "extraction, full pipeline" tiles/s 700 extract
else
  failed extract_pipeline "extraction, full pipeline" tiles/s 700 extract
fi

# (a) the grid, one run per regime
for regime in "${REGIMES[@]}"; do
  run_check "grid_$regime" "$CAP_GRID" "$PY" benchmarks/bench_grid.py --variants reference,fast --datasets pcam \
    --regime "$regime" --threads 1 "${GRID_ARGS[@]}" --json "$WORK/grid_$regime.json"
  scale=${GRID_ARGS[1]}
  if [ "$CHECK_RC" = 0 ]; then
    "$PY" "$LIB" grid "$RECORDS" "$MODE" "$WORK/grid_$regime.json" "grid_$regime" "$CHECK_SECONDS" "$regime" "$scale" \
      || failed "grid_$regime" "grid fast / reference loop (regime $regime, PCam x$scale)" x 20
  else
    failed "grid_$regime" "grid fast / reference loop (regime $regime, PCam x$scale)" x 20
  fi
done

# (c) --extract-workers across GPUs
N=0
if [ "$MODE" = smoke ]; then
  N=$SMOKE_WORKERS
  WORKER_ARGS=(--model timm:vit_tiny_patch16_224 --model-args img_size=64 --n 32 --batch 8 --shard 8 --repeat 1 --workers 0)
elif [ "${GPUS:-0}" -ge 2 ]; then
  N=$GPUS
  WORKER_ARGS=(--model h_optimus_0 --n "$TILES" --batch "$BATCH" --shard $(( TILES / (2 * GPUS) > 0 ? TILES / (2 * GPUS) : 1 )) --repeat 2)
fi
if [ "$N" -ge 2 ]; then
  run_check workers "$CAP_WORKERS" "$PY" benchmarks/bench_extract.py --device "$DEVICE" --extract-workers "$N" \
    "${WORKER_ARGS[@]}" --json "$WORK/workers.json"
  if [ "$CHECK_RC" = 0 ] || [ "$CHECK_RC" = 1 ]; then  # 1: ran, features differ (recorded as FAIL)
    "$PY" "$LIB" workers "$RECORDS" "$MODE" "$WORK/workers.json" "$CHECK_SECONDS" || failed workers_identical "--extract-workers 1 vs $N" bool 1 workers
  else
    failed workers_identical "--extract-workers 1 vs $N" bool 1 workers
  fi
else
  if [ "$MODE" = smoke ]; then
    why="cpu smoke: the one-GPU branch (add --smoke-workers 2 to run the 1-vs-2 comparison on CPU processes)"
  else
    why="${GPUS:-0} GPU visible: --extract-workers N needs N GPUs (one per worker), and 1 worker is the in-process path, so there is nothing to compare; needs a machine of >= 2 GPUs"
  fi
  echo "== [workers] skipped: $why"
  "$PY" "$LIB" record "$RECORDS" "$MODE" workers_identical "--extract-workers 1 vs N GPUs" bool 1 SKIP 0 "$why"
fi

finish
