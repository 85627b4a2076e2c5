#!/usr/bin/env bash
# The converger on a real GPU host, as root: one prepared script for a lent GPU machine.
#
#   sudo bash hack/real_gpu_smoke.sh [OUTDIR]
#
# It runs this checkout's bcd-holds (the very code the modules run, started with python3 -I as the
# role's launcher does) against the real host: NVML or nvidia-smi for the inventory, NVIDIA's CDI
# spec when nvidia-ctk can generate one, /etc/cdi and /run/bcd/allocations for the holds. It binds
# a whole GPU, re-runs the same input (nothing to do), moves the GPU to two slot holds, and
# releases everything, printing the plan, the files and the signed events at each step. It never
# changes the GPU's settings (no MIG mode change, no reset) and removes what it made: its state
# directory, its holds, and a vendor spec it generated itself.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
out=${1:-${OUT:-/tmp/bcd-real-gpu}}
mkdir -p "$out"
exec > >(tee "$out/smoke.log") 2>&1

state_dir=/var/lib/bcd-real-gpu-smoke
lib=$(mktemp -d /tmp/bcd-lib.XXXXXX)
made_vendor=""
cleanup() {
  rm -rf "$lib" "$state_dir"
  rm -f /etc/cdi/bcd-smoke_*.json /run/bcd/allocations/smoke_*.env 2>/dev/null
  [[ -n $made_vendor ]] && rm -f "$made_vendor"
}
trap cleanup EXIT

step() { printf '\n=== %s\n' "$*"; }

step "the host"
id -u; uname -r; python3 --version
command -v nvidia-smi nvidia-ctk podman docker containerd ctr systemd-run 2>/dev/null
[[ -d /run/systemd/system ]] && echo "systemd is PID 1" || echo "systemd is not PID 1 (no slices)"
nvidia-smi -L
nvidia-smi --query-gpu=index,uuid,name,driver_version,mig.mode.current,pci.bus_id,memory.total --format=csv
PYTHONPATH="${BCD_SMOKE_PYTHONPATH:-}" python3 -c 'import cryptography; print("cryptography", cryptography.__version__)' || echo "no cryptography: events cannot be signed"
ls -la /etc/cdi /var/run/cdi 2>/dev/null

mkdir -p "$lib/ansible_collections/bcd"
ln -s "$PWD" "$lib/ansible_collections/bcd/devices"
# BCD_SMOKE_PYTHONPATH: extra folders (colon-separated) for the launcher's sys.path, e.g. carried
# wheels of 'cryptography' on a machine whose Python lacks it (-I ignores PYTHONPATH, as the role's does).
extra=${BCD_SMOKE_PYTHONPATH:-}
cat > "$lib/bcd-holds" <<EOF
import sys
sys.path[:0] = ["$lib"] + [p for p in "$extra".split(":") if p]
from ansible_collections.bcd.devices.plugins.module_utils.entry.cli import main
sys.exit(main())
EOF
bcd() { python3 -I "$lib/bcd-holds" "$@" --state-dir "$state_dir"; }

if command -v nvidia-ctk >/dev/null && ! ls /etc/cdi/nvidia.* /var/run/cdi/nvidia.* >/dev/null 2>&1; then
  step "NVIDIA's CDI spec (nvidia-ctk cdi generate)"
  mkdir -p /var/run/cdi
  if nvidia-ctk cdi generate --output=/var/run/cdi/nvidia.yaml >"$out/nvidia-ctk.log" 2>&1; then
    made_vendor=/var/run/cdi/nvidia.yaml
    cp "$made_vendor" "$out/nvidia.yaml"
    nvidia-ctk cdi list 2>/dev/null
  else
    tail -5 "$out/nvidia-ctk.log"
  fi
fi

mapfile -t uuids < <(nvidia-smi --query-gpu=uuid --format=csv,noheader | tr -d ' ')
gpu=${uuids[0]:?no GPU listed by nvidia-smi}

spec() {  # generation, then assignments as JSON
  printf '{"generation": %s, "devices": %s, "instances": []}\n' "$1" "$2" > "$out/spec-$1.json"
  echo "$out/spec-$1.json"
}
show_files() {
  ls -la /etc/cdi /run/bcd/allocations 2>/dev/null
  for f in /etc/cdi/bcd-smoke_*.json; do [[ -e $f ]] && { echo "--- $f"; cat "$f"; echo; cp "$f" "$out/"; }; done
  for f in /run/bcd/allocations/smoke_*.env; do [[ -e $f ]] && { echo "--- $f"; cat "$f"; }; done
}

step "doctor and status before any hold"
bcd doctor; echo "doctor exit $?"
bcd status; echo "status exit $?"

step "generation 1: a whole GPU ($gpu)"
s=$(spec 1 "[{\"allocation_id\": \"smoke_whole\", \"reservation_id\": \"rsv_smoke\", \"binding\": \"BINDING_HOLD\",
  \"devices\": [{\"id\": \"$gpu\", \"device_class\": \"gpu\"}], \"env\": [\"TEAM=smoke\"]}]")
bcd converge --check --spec "$s"; echo "check exit $?"
/usr/bin/time -f "pass: %e s wall, %M KB max RSS" python3 -I "$lib/bcd-holds" converge --spec "$s" --state-dir "$state_dir"
echo "converge exit $?"
show_files

step "generation 1 again: nothing to do"
bcd converge --spec "$s"; echo "converge exit $?"

step "generation 2: the GPU moves to two slot holds (s0, s1)"
s=$(spec 2 "[{\"allocation_id\": \"smoke_s0\", \"reservation_id\": \"rsv_smoke\", \"binding\": \"BINDING_HOLD\",
  \"devices\": [{\"id\": \"$gpu/s0\", \"device_class\": \"gpu.slot\"}]},
  {\"allocation_id\": \"smoke_s1\", \"reservation_id\": \"rsv_smoke\", \"binding\": \"BINDING_HOLD\",
  \"devices\": [{\"id\": \"$gpu/s1\", \"device_class\": \"gpu.slot\"}]}]")
bcd converge --spec "$s"; echo "converge exit $?"
show_files
bcd status; bcd busy "$gpu"; echo "busy exit $?"
if command -v nvidia-ctk >/dev/null; then nvidia-ctk cdi list 2>/dev/null | grep bcd.dev || echo "nvidia-ctk lists no bcd.dev device"; fi

step "generation 3: everything released"
s=$(spec 3 "[]")
bcd converge --spec "$s"; echo "converge exit $?"
show_files
bcd busy "$gpu"; echo "busy exit $?"

step "the signed journal"
bcd events | tee "$out/events.txt"
bcd metrics | grep -v '^#' | head -20
echo "done"
