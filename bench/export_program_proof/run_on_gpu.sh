#!/bin/bash
# Kept from the helper session that ran it (as .gpucarry/run7.sh, with this folder as .gpucarry/proof, xisa's tree copied
# to .gpucarry/xh and the wheels liger_kernel-0.8.5 in .gpucarry/whl2, fla_core-0.6.0 in .gpucarry/whl3) on an H100,
# Triton 3.6.0, torch 2.11, Python 3.12: both programs ok (0 compiles from the bundle, outputs equal to a JIT run's).
# Issue 37 on a GPU: Liger's and fla's programs captured as sm_90 (--no-run, no GPU used, every autotuner config:
# --config-policy all), exported as bundles with this machine's Triton, verified, then run for real with
# TRITON_CACHE_DIR at the bundle (Triton's compilation listener counts compiles; the folder is compared file by file)
# and once more as a JIT run (an empty cache seeded only with the bundle run's autotune results, so the autotuners
# pick the same configs and the outputs can be compared byte for byte). xisa: main's HEAD, copied to .gpucarry/xh.
# run7 (after run6 on an H100): the specs are the --no-run capture's cases plus those a capture of the program's real
# launches on this GPU adds (--no-run runs the program on CPU tensors, and Liger's sm_count and fla's
# check_shared_mem(.., tensor.device.index) take their CPU branch there); `xisa export` with torch's compile stack
# imported first (proof/preimport/sitecustomize.py: fla.modules' loads failed in the export's workers otherwise).
# Use: run(command="bash .gpucarry/run7.sh 2>&1 | tee $OUT/run7.log", carry=[".gpucarry"], timeout_s=560)
set -u
export PYTHONUNBUFFERED=1
REPO=$PWD; G=$REPO/.gpucarry; P=$G/proof; T0=$(date +%s)
t() { echo "[+$(( $(date +%s) - T0 ))s] $*"; }
date -u; nvidia-smi -L; python3 -c "import sys, torch, triton; print('python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__)"
echo "xisa commit $(cat $G/xh/COMMIT)"; env | grep '^TRITON_' || echo "no TRITON_ variable set"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $G/whl2/*.whl $G/whl3/*.whl || exit 3
export XISA_CACHE_DIR=/tmp/xc
OUTD=${OUT:-/tmp/out}; mkdir -p $OUTD

prove() {   # NAME PROG JOBS
  local N=$1 PROG=$2 J=$3 W=/tmp/w-$1 BL=/tmp/b-$1 JIT=/tmp/j-$1
  rm -rf $W $BL $JIT; mkdir -p $W $JIT; cd $W
  printf '[tool.xisa]\nspecs = ["captured"]\n' > pyproject.toml; cp $P/proofhook.py $P/$PROG .
  t "$N: capture --no-run --as sm_90 --config-policy all"
  PYTHONPATH=$G/xh:/tmp/site timeout 150 python3 -m xisa capture --no-run --as sm_90 --no-check --config-policy all --out captured -- python3 $PROG > cap.log 2>&1; echo "capture rc=$?"
  grep -v "^wrote" cap.log | tail -4
  if [ -z "$(ls captured 2>/dev/null)" ]; then echo "FALLBACK: no spec captured here; using the specs captured on the CPU machine (Triton 3.8)"; rm -rf captured; cp -r $P/cap-local-$N captured; fi
  echo "--no-run specs: $(ls captured | wc -l), cases: $(cat captured/*.yaml | grep -c '^  - name:')"; cp -r captured captured-norun
  t "$N: capture of the real launches on this GPU, into the same folder"
  TRITON_CACHE_DIR=$W/capcache PYTHONPATH=$G/xh:/tmp/site timeout 200 python3 -m xisa capture --no-check --config-policy all --out captured -- python3 $PROG > cap-gpu.log 2>&1; echo "GPU capture rc=$?"
  grep -v "^wrote" cap-gpu.log | grep -v "^PROOF" | tail -4
  python3 - <<'PY'
import json, re
from pathlib import Path
def cases(folder):
    return {f"{re.search(r'^name: (.+)$', p.read_text(), re.M)[1]}:{c}" for p in Path(folder).glob("*.yaml")
            for c in re.findall(r"^  - name: (.+)$", p.read_text(), re.M)}
norun, now = cases("captured-norun"), cases("captured")
added = sorted(now - norun)
json.dump(added, open("added.json", "w"))
print(f"specs: {len(list(Path('captured').glob('*.yaml')))}, cases: {len(now)}; the GPU capture added {len(added)} "
      f"cases the --no-run capture lacks: {added}")
PY
  t "$N: export -j $J"
  PYTHONPATH=$P/preimport:$G/xh:/tmp/site timeout 300 python3 -m xisa export --spec captured --arch sm_90 -j $J -o $BL > export.log 2>&1; echo "export rc=$?"; tail -4 export.log
  t "$N: verify"
  PYTHONPATH=$G/xh:/tmp/site python3 -m xisa export --verify $BL > verify.log 2>&1; echo "verify rc=$?"; grep -v " found under " verify.log | tail -5
  python3 $P/snap.py $BL $W/before.json
  t "$N: run on the bundle (no xisa on the path)"
  TRITON_CACHE_DIR=$BL PROOF_OUT=$W/bundle.pt PYTHONPATH=/tmp/site timeout -s INT 240 python3 $PROG > bundle-run.log 2>&1; echo "bundle run rc=$?"; grep -v "^PROOF compiled" bundle-run.log | tail -8; echo "compile lines: $(grep -c "^PROOF compiled" bundle-run.log)"
  python3 $P/snap.py $BL $W/after.json
  python3 - $BL $W/before.json $W/after.json $JIT <<'PY'
import json, shutil, sys
from pathlib import Path
bl, b, a, jit = Path(sys.argv[1]), json.load(open(sys.argv[2])), json.load(open(sys.argv[3])), Path(sys.argv[4])
n = 0
for f in set(a) - set(b):
    if f.endswith(".autotune.json"):
        (jit / f).parent.mkdir(parents=True, exist_ok=True); shutil.copy(bl / f, jit / f); n += 1
print(f"JIT cache seeded with {n} autotune results of the bundle run (no kernel)")
PY
  t "$N: JIT run"
  TRITON_CACHE_DIR=$JIT PROOF_OUT=$W/jit.pt PYTHONPATH=/tmp/site timeout -s INT 240 python3 $PROG > jit-run.log 2>&1; echo "JIT run rc=$?"; tail -8 jit-run.log
  echo "JIT cache: $(find $JIT -name '*.cubin' | wc -l) cubins"
  python3 $P/judge.py $N $BL $W/before.json $W/after.json $W/bundle.pt $W/jit.pt $W/added.json; echo "judge rc=$?"
  t "$N: done"
}
ONLY=${ONLY:-liger,fla}
[[ $ONLY == *liger* ]] && { prove liger liger_prog.py 3 > $OUTD/liger.log 2>&1 & }
[[ $ONLY == *fla* ]] && prove fla fla_prog.py 13 > $OUTD/fla.log 2>&1
wait
cd /tmp && tar czf $OUTD/logs.tgz w-liger/*.log w-fla/*.log w-*/captured w-*/captured-norun w-*/added.json b-*/manifest.json 2>/dev/null
echo "===== liger"; cat $OUTD/liger.log; echo "===== fla"; cat $OUTD/fla.log
date -u
