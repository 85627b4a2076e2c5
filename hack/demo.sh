#!/usr/bin/env bash
# make demo: build a fakehw GPU node in a temporary directory and run demo/playbook.yml against it.
# DEMO_CORE picks the ansible-core release: 2.19 (.venv's, the default) or a newer one from its own
# venv (hack/core_venv.sh): make demo DEMO_CORE=2.22.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(bash hack/core_venv.sh "${DEMO_CORE:-2.19}")
"$bin/python" -c 'import sys, ansible.release; print("== ansible-core %s on Python %s (%s)" % (ansible.release.__version__, sys.version.split()[0], sys.executable))'
root=$(mktemp -d "${TMPDIR:-/tmp}/bcd-demo.XXXXXX")
"$bin/python" hack/fakehw_node.py --root "$root/node-a" --node-id node-a --gpus 4 --mig-gpu 1 \
  --domain inst_7:3 --compact >/dev/null
echo "== A fakehw node in $root/node-a: 4 GPUs, GPU 1 split into two MIG instances,"
echo "== a running VM inst_7 with GPU 3, and NVIDIA's vendor spec in var/run/cdi/nvidia.yaml"
export ANSIBLE_COLLECTIONS_PATH="$PWD/.build" ANSIBLE_HOME="$PWD/.build/ansible-home"
export ANSIBLE_STDOUT_CALLBACK=default ANSIBLE_NOCOLOR="${ANSIBLE_NOCOLOR:-}" ANSIBLE_RETRY_FILES_ENABLED=0
export ANSIBLE_LOCALHOST_WARNING=0 ANSIBLE_INVENTORY_UNPARSED_WARNING=0
cat > "$root/inventory.yml" <<INVENTORY
demo_nodes:
  hosts:
    node-a:
      ansible_connection: local
      ansible_python_interpreter: $bin/python
      bcd_root: $root/node-a
INVENTORY
"$bin/ansible-playbook" -i "$root/inventory.yml" demo/playbook.yml "$@"
echo "== The node's files are in $root/node-a (etc/cdi, run/bcd/allocations, var/lib/bcd)"
if [[ " $* " != *" --diff "* ]]; then
  echo "== make demo DEMO_ARGS=--diff shows every file each task writes, in full, after its plan"
fi
