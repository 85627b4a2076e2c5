#!/usr/bin/env python
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Build a fakehw GPU node under a directory: a hardware file and NVIDIA's vendor spec.

The vendor spec is NVIDIA's real ``nvidia-ctk cdi generate`` output
(tests/data/nvidia-cdi/salilkadam_nvidia.yaml, toolkit 1.17.8) with its one GPU
turned into the fake GPUs: each GPU named twice (``"<index>"`` and ``GPU-<uuid>``)
with ``/dev/nvidia<minor>``, each MIG device twice (``"<gpu>:<mig>"`` and
``MIG-<uuid>``) with its parent's node and two ``nvidia-caps`` nodes, plus
``all``. The common edits (control nodes, driver mounts, hooks,
``NVIDIA_VISIBLE_DEVICES=void``) are NVIDIA's own.

    hack/fakehw_node.py --root /tmp/node-a [--gpus 4] [--mig-gpu 1] [--node-id node-a]
                        [--vendor yaml|json|none] [--domain inst_1:2] [--compact]
"""

import argparse
import copy
import json
import os
import sys

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "..", "tests", "data", "nvidia-cdi", "salilkadam_nvidia.yaml")


def gpu_uuid(node, index):
    return "GPU-5f1c2a90-%04x-4000-8000-%012x" % (node, index + 1)


def mig_uuid(node, gpu, mig):
    return "MIG-7089d0f3-%04x-58c9-8f8c-%08x%04x" % (node, gpu, mig)


def build_hw(node_number, node_id, gpus, mig_gpus, domains):
    hw = {"node_id": node_id, "boot_id": "6f0c1e9e-1c7a-4a43-9a9e-%012x" % node_number, "gpus": [],
          "domains": [], "kubelet": {"reachable": True, "pods": []}}
    for index in range(gpus):
        gpu = {"uuid": gpu_uuid(node_number, index), "index": index, "minor": index, "numa_node": index * 2 // gpus}
        if index in mig_gpus:
            gpu["mig"] = [{"gi": gi, "ci": 0, "uuid": mig_uuid(node_number, index, gi)} for gi in (1, 2)]
        hw["gpus"].append(gpu)
    for spec in domains:
        instance_id, gpu_index = spec.split(":")
        hw["domains"].append({"instance_id": instance_id, "state": "running", "memory_bytes": 8 << 30,
                              "hugepages": False, "gpus": [gpu_uuid(node_number, int(gpu_index))]})
    return hw


def build_vendor_spec(hw, compact=False):
    with open(FIXTURE) as handle:
        real = yaml.safe_load(handle)
    template = next(device for device in real["devices"] if device["name"].startswith("GPU-"))
    devices = []
    for gpu in hw["gpus"]:
        edits = copy.deepcopy(template["containerEdits"])
        edits["deviceNodes"] = [{"path": "/dev/nvidia%d" % gpu["minor"]},
                                {"path": "/dev/dri/card%d" % (gpu["minor"] + 1)},
                                {"path": "/dev/dri/renderD%d" % (128 + gpu["minor"])}]
        edits.pop("hooks", None)  # NVIDIA's hooks link the real GPU's PCI path; a fake GPU has none
        for name in (str(gpu["index"]), gpu["uuid"]):
            devices.append({"name": name, "containerEdits": copy.deepcopy(edits)})
        for number, inst in enumerate(gpu.get("mig", [])):
            caps = 3 + gpu["index"] * 20 + inst["gi"] * 2
            mig_edits = {"deviceNodes": [{"path": "/dev/nvidia%d" % gpu["minor"]},
                                         {"path": "/dev/nvidia-caps/nvidia-cap%d" % caps},
                                         {"path": "/dev/nvidia-caps/nvidia-cap%d" % (caps + 1)}]}
            for name in ("%d:%d" % (gpu["index"], number), inst["uuid"]):
                devices.append({"name": name, "containerEdits": copy.deepcopy(mig_edits)})
    devices.append({"name": "all", "containerEdits": {
        "deviceNodes": [{"path": "/dev/nvidia%d" % gpu["minor"]} for gpu in hw["gpus"]]}})
    common = real["containerEdits"]
    if compact:  # a short spec for the demo: the first few of NVIDIA's ~45 library mounts
        common["mounts"] = common["mounts"][:3]
    return {"cdiVersion": real["cdiVersion"], "kind": real["kind"], "devices": devices, "containerEdits": common}


class QuotedNames(yaml.SafeDumper):
    """Quote every string, as nvidia-ctk does for names such as "0:1" (YAML 1.1 reads 1:0 as 60)."""


QuotedNames.add_representer(str, lambda dumper, value: dumper.represent_scalar(
    "tag:yaml.org,2002:str", value, style='"' if ":" in value or value.isdigit() else None))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", required=True)
    parser.add_argument("--node-id", default="node-a")
    parser.add_argument("--node-number", type=int, default=1)
    parser.add_argument("--gpus", type=int, default=4)
    parser.add_argument("--mig-gpu", type=int, action="append", default=None)
    parser.add_argument("--vendor", choices=("yaml", "json", "none"), default="yaml")
    parser.add_argument("--compact", action="store_true", help="keep only a few of NVIDIA's library mounts")
    parser.add_argument("--domain", action="append", default=[], help="INSTANCE:GPU_INDEX, a running VM")
    args = parser.parse_args(argv)
    mig_gpus = args.mig_gpu if args.mig_gpu is not None else [1]
    hw = build_hw(args.node_number, args.node_id, args.gpus, mig_gpus, args.domain)
    os.makedirs(args.root, exist_ok=True)
    with open(os.path.join(args.root, "fakehw.yml"), "w") as handle:
        yaml.safe_dump(hw, handle, sort_keys=False)
    if args.vendor != "none":
        spec_dir = os.path.join(args.root, "var", "run", "cdi")
        os.makedirs(spec_dir, exist_ok=True)
        spec = build_vendor_spec(hw, args.compact)
        with open(os.path.join(spec_dir, "nvidia." + args.vendor), "w") as handle:
            if args.vendor == "json":
                json.dump(spec, handle, indent=2)
            else:
                yaml.dump(spec, handle, Dumper=QuotedNames, sort_keys=False)
    print(os.path.join(args.root, "fakehw.yml"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
