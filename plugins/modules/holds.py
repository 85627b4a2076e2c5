#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module bcd.devices.holds: converge a node's GPU holds to its devices section."""

from __future__ import annotations

DOCUMENTATION = r"""
module: holds
short_description: Converge a GPU node's holds (CDI specs, env files, events) to its reservations
version_added: 0.1.0
description:
  - Takes the node's C(devices) section, one C(DeviceAssignment) per allocation, and makes the node
    hold exactly those. A hold is a CDI spec C(/etc/cdi/bcd-<allocation_id>.json) that a container
    runtime resolves as C(bcd.dev/gpu=<device>), and an env file
    C(/run/bcd/allocations/<allocation_id>.env) for workload managers that read env files.
  - Holds no longer wanted are released before new ones are bound, so a GPU can move between
    allocations in one generation. A released hold's slice is stopped only once it is empty; a release
    never kills a workload. A Kubernetes hold's release is recorded in C(releasing.json), its files are
    removed at once, and C(AllocationReleased) is reported only once no pod holds its devices; meanwhile
    its devices stay claimed. Holds still wanted are kept; a kept hold whose rendering changed
    (a new NVIDIA vendor spec after a driver upgrade or MIG change, a new reservation id) is written
    again, and a missing env file (it lives on tmpfs) is rewritten.
  - Each new hold is checked in order (binding, privilege, atoms, conflicts, host admission); one that
    fails is refused with a reason (V(unsupported-binding), V(node-unprivileged), V(unsupported-device),
    V(device-missing), V(overlap), V(resources-exhausted), V(invalid-assignment)) and reported once per allocation and
    generation as an C(AllocationFailed) event. The others of the pass are bound anyway.
  - Every bind and release is journaled as an event signed with the node's Ed25519 key
    (C(AllocationBound), C(AllocationReleased)) before the module returns it. Events are returned
    by every run until M(bcd.devices.events) acknowledges them.
  - The existing holds are read back from C(/etc/cdi/bcd-*.json) on every run, never remembered.
  - Two runs never interleave on one node; a lock under O(state_dir) keeps them apart.
author:
  - bcd.devices developers (@bcd-devices)
requirements:
  - C(cryptography) on the node (signs events)
  - C(PyYAML) on the node (reads a YAML vendor spec or fakehw file)
  - C(grpcio) and C(protobuf) 3.20 or later on a Kubernetes node (asks the kubelet which pods hold devices)
options:
  generation:
    description:
      - The NodeSpec generation these assignments belong to, as a control plane numbers its specs. A refusal
        is final at its generation, and reported once per allocation and generation.
      - Left out, the node numbers its inputs itself - the generation of the input it stored at the last pass
        when O(devices) and O(instances) are the same (a run with the same input does nothing new), else one
        more - so a fixed input is judged afresh. This is the way for playbooks a person writes.
      - Given, and equal to the generation the node finished with the stored input while O(devices) or
        O(instances) differ, the task fails before anything is written -
        C(generation 3 was already applied with a different devices section; raise generation, or leave it out to let the node number its inputs)
        (C(instances section) when only the instances differ, C(devices and instances sections) when both do).
      - A generation whose pass was left RV(section.state=PROGRESSING) may be sent a fixed input, but not one
        that sends an allocation refused at it with another assignment (the refusal would judge it); the task
        fails the same way, before anything is written -
        C(generation 2 refused a1 for the assignment it was sent then, and a refusal is final at its generation ...).
      - A generation older than the last one the node finished is refused.
    type: int
  devices:
    description:
      - The C(DeviceAssignment)s, one mapping per allocation. An empty list releases every hold.
      - C(allocation_id) (required) names the hold's files and events; it must match C(^[A-Za-z0-9_]{1,80}$)
        and appear once.
      - C(reservation_id) is written into the spec's annotations and the env file.
      - C(binding) (required) is V(BINDING_HOLD) (a workload manager on the node) or V(BINDING_KUBERNETES)
        (the kubelet's device plugins; no vendor edits and no C(NVIDIA_VISIBLE_DEVICES) in the spec). Any
        other binding is refused with V(unsupported-binding), whatever else the assignment has wrong (the binding
        is checked first); a missing or empty one too (proto3's V(BINDING_UNSPECIFIED)), with the message
        C(binding is missing).
      - C(instance_id) is accepted and not read (GPUs for VMs arrive in O(instances)).
      - C(devices) (required, at least one) lists the atoms, each C(id) and C(device_class) (V(gpu),
        V(gpu.mig), V(gpu.slot); empty reads as V(gpu)). A whole GPU is its UUID, a MIG instance
        C(<GPU uuid>/gi<N>/ci<M>), a slot C(<GPU uuid>/s<N>).
      - C(limits) books host resources (C(cpus), C(mems), C(cpu_millis), C(memory_bytes), C(hugepages_2mi),
        C(hugepages_1gi)). A plain hold with limits gets the slice C(bcd-alloc-<allocation_id>.slice), created
        before its spec names it; a hold whose limits carry memory or huge pages is first admitted against the
        host's committed memory (V(resources-exhausted) when it does not fit). A Kubernetes hold never gets a
        slice, but its memory counts against later holds. C(cpus) and C(mems) are cpulists (V(0-3,8)); an
        integer is the one CPU or NUMA node it names (V(0) is CPU 0). As in proto3, a number's V(0) and a cpulist's
        empty string are a field left unset, so no limit; the task warns about each.
      - C(env) lists extra C(KEY=VALUE) lines for the env file (or is a mapping). Keys match
        C(^[A-Za-z_][A-Za-z0-9_]{0,127}$); C(BCD_*), C(NVIDIA_VISIBLE_DEVICES) and C(CUDA_MPS_PIPE_DIRECTORY)
        are bcd's own, and keys that change what programs load or run (C(PATH), C(LD_*), C(PYTHON*),
        C(NVIDIA_*), C(CUDA_*) and more) are refused, as are values with a control character
        (docs/security.md, "The env policy").
      - The section is bounded whole, to at most 4096 atoms (an assignment past that is refused) and
        4 MiB (a larger section fails the task).
      - Every field is checked; an assignment that cannot be honoured as given is refused with
        V(invalid-assignment) and a message naming the field, and the others of the pass go on.
    type: list
    elements: raw
    required: true
  instances:
    description:
      - The NodeSpec's instances; their GPUs are passed through to VMs and a hold on them is refused with
        V(overlap).
    type: list
    elements: dict
    default: []
    suboptions:
      instance_id:
        description: The instance's id, named in the conflict message.
        type: str
        required: true
      gpus:
        description: UUIDs of the GPUs the instance has or is to have through VFIO.
        type: list
        elements: str
        default: []
  on_refusal:
    description:
      - What a refused assignment does to the task. The others of the pass are bound either way, and every
        refusal is returned in RV(failures) and journaled as C(AllocationFailed).
      - "V(fail) fails the task, as a state module that did not reach the asked state, with every return value
        still there; C(msg) lists C(<allocation_id>: <reason>: <message>) for each refusal, followed by what would
        help where the node knows (the GPUs it has, for one it lacks). No warning says the refusals again."
      - V(report) lets the task succeed with RV(section.state=FAILED), each refusal a warning, for a play that
        delivers the events to a control plane which reads the refusals there (the role bcd.devices.bcd_holds does).
      - "A pass without root and without the helper (V(node-unprivileged)) fails the task whatever this says, its
        C(msg) starting with C(add become: true); it writes nothing, no state file either."
      - Defaults to V(fail), or to what the deprecated O(fail_on_refusal) says when that is set.
    type: str
    choices: [fail, report]
    version_added: 0.3.0
  diff_detail:
    description:
      - What C(--diff) shows of a hold's CDI spec.
      - V(summary) shows what bcd decides whole (the devices and their per-device edits, bcd's env lines, the
        annotations) and the vendor's common edits, which every hold copies from NVIDIA's spec (some 600 lines of
        mounts and hooks), as one line - how many mounts, hooks and device nodes, from which vendor spec, and a
        digest, so that line changes whenever they do.
      - V(full) shows every line, as the spec is on disk.
      - The spec written is whole either way, and check mode plans the same.
    type: str
    choices: [summary, full]
    default: summary
    version_added: 0.3.0
  env_allow:
    description:
      - The only env keys a hold's C(env) may set on this node - an operator's allowlist. An assignment with a key
        it does not list is refused V(invalid-assignment), naming the entry and the key, as a key the env policy
        refuses is.
      - It narrows the env policy, never widens it - a key the policy refuses (C(LD_PRELOAD), C(GIT_*),
        C(SLURM_*)) is an error here, failing the task before anything is written.
      - Left out, every key the policy allows is accepted. The timers' passes use what the last task gave.
      - docs/security.md, "The env policy".
    type: list
    elements: str
    version_added: 0.3.0
  metrics_textfile:
    description:
      - A node path ending in C(.prom) in node_exporter's textfile directory - the node's metrics (C(bcd-holds metrics),
        the Prometheus text format) are written there atomically after the pass, as the role's timers write them after
        theirs. Not in check mode.
      - A metrics file that cannot be written is a warning - the pass stands.
      - The role P(bcd.devices.bcd_holds#role) sets it from its C(bcd_holds_metrics_textfile).
    type: str
    version_added: 0.3.0
  fail_on_refusal:
    description:
      - Deprecated, use O(on_refusal) - V(true) is O(on_refusal=fail), V(false) O(on_refusal=report).
      - Until 0.2.0 a refusal failed the task only with V(true).
    type: bool
extends_documentation_fragment:
  - bcd.devices.node
  - bcd.devices.node.helper
  - bcd.devices.node.runtimes
  - bcd.devices.node.lock
attributes:
  check_mode:
    support: full
    description:
      - Computes the same plan a real run performs and returns it in RV(plan); writes nothing, not even
        the state directory, the journal or the node key.
  diff_mode:
    support: full
    description:
      - Shows the plan as text first, then the before and after of every CDI spec and env file the run writes or
        removes, and the settings of every slice it creates, sets or stops. The state files under O(state_dir) are not
        shown; the plan's lines say what each step records there.
  idempotent:
    support: full
    description:
      - A second run with the same input reports C(changed=false) and journals no new event.
notes:
  - A run that cannot write a file (a full disk, a refused helper operation) leaves
    RV(section.state=PROGRESSING), journals no event for that hold and fails the task, so C(until)
    retries work; the next run finishes the work. Its C(changed) says whether it changed the node all the same
    (a release whose spec went and whose env file could not). A bind whose spec cannot be written removes the env
    file it wrote.
  - Run as root, or as an ordinary user beside the root helper (O(helper_socket)). A run without root and
    without a helper refuses every new hold with V(node-unprivileged), advertises none of the capabilities
    that need root, and writes nothing.
seealso:
  - module: bcd.devices.holds_info
  - module: bcd.devices.events
  - plugin: bcd.devices.verify_report
    plugin_type: filter
"""

EXAMPLES = r"""
- name: Hold one whole GPU and a MIG instance for two allocations
  bcd.devices.holds:
    generation: 42
    devices:
      - allocation_id: alloc_01jz8k2v
        reservation_id: rsv_01jz8k1q
        binding: BINDING_HOLD
        devices:
          - {id: GPU-5f1c2a90-0000-4000-8000-000000000001, device_class: gpu}
        env:
          - TEAM=vision
      - allocation_id: alloc_01jz8k3a
        binding: BINDING_HOLD
        reservation_id: rsv_01jz8k20
        devices:
          - {id: GPU-5f1c2a90-0000-4000-8000-000000000002/gi1/ci0, device_class: gpu.mig}
  register: pass_result

- name: Show what was refused
  ansible.builtin.debug:
    msg: "{{ item.allocation_id }}: {{ item.reason }}: {{ item.message }}"
  loop: "{{ pass_result.failures }}"

# Without generation the node numbers the input: the generation it stored when devices and instances are
# the same (here 42: nothing new to do), one more when they changed.
- name: Retry while a write keeps failing
  bcd.devices.holds:
    devices: "{{ node_devices }}"
  register: retried
  until: retried is succeeded
  retries: 5
  delay: 30

- name: Write specs the node's runtimes load, naming them (auto finds them; a hold they cannot load is refused)
  bcd.devices.holds:
    generation: 42
    devices: "{{ node_devices }}"
    cdi_runtimes:
      - {name: podman, version: "5.4.2"}
      - {name: containerd, version: "2.1.4"}

- name: Release every hold
  bcd.devices.holds:
    generation: 43
    devices: []

# hack/fakehw_node.py --root /tmp/bcd-nodes/node-a makes the node; its GPU 0 is GPU-5f1c2a90-0001-4000-8000-000000000001
- name: Converge a fakehw host (a directory and a hardware file, no GPU needed)
  bcd.devices.holds:
    generation: 1
    root: /tmp/bcd-nodes/node-a
    fakehw: /tmp/bcd-nodes/node-a/fakehw.yml
    devices:
      - allocation_id: alloc_demo
        binding: BINDING_HOLD
        devices: [{id: GPU-5f1c2a90-0001-4000-8000-000000000001}]
"""

RETURN = r"""
ran_from:
  description:
    - Which code ran - V(node-library), the library the role bcd.devices.bcd_holds installed on the node (it
      is this controller's code, verified by content, and root's alone), or V(bundled), the module as Ansible
      ships it (with a warning naming why the library could not run, unless C(bcd_devices_node_library) is false).
    - The result is otherwise the same. docs/performance.md, "The node library".
  returned: always
  type: str
  sample: node-library
plan:
  description: The ordered actions of the pass (in check mode, those a real run would perform).
  returned: always
  type: list
  elements: dict
  contains:
    action:
      description: >-
        V(bind), V(rebind) (a wanted hold whose spec is damaged: set aside and written again),
        V(release), V(finish-release), V(rerender), V(write-env), V(report-bound), V(refuse),
        V(create-slice), V(apply-slice), V(stop-slice), V(keep-slice) (shown, changes nothing: a slice
        whose hold is gone still runs a workload), V(remove-env) (an env file no spec, report or release stands
        behind, which a bind that never finished left); for Kubernetes holds V(release-kube), V(withdraw),
        V(report-release), V(drop-release), V(take-back-release) (a pending release the input takes
        back while pods still hold old devices), V(quarantine-releases) and V(clear-marker); V(report-condition)
        (a node condition appeared or cleared since the last pass: one signed event, docs/events.md).
      type: str
      returned: always
    allocation_id:
      description: The allocation the action is for (empty for V(quarantine-releases), V(clear-marker) and V(report-condition)).
      type: str
      returned: always
    text:
      description: The action in one line.
      type: str
      returned: always
    device_ids:
      description: The atoms the action concerns.
      type: list
      elements: str
      returned: when the action concerns devices
    files:
      description: The node files the action writes or removes.
      type: list
      elements: dict
      returned: when the action touches files
      contains:
        path:
          description: The node path.
          type: str
        change:
          description: V(create), V(update) or V(remove).
          type: str
    event:
      description: The type of the event the action journals (V(AllocationBound), V(AllocationReleased), V(AllocationFailed)).
      type: str
      returned: when the action reports an event
    slice:
      description: >-
        The slice step: C({op: apply, name, properties, hugetlb_max}) to create or set a slice,
        C({op: remove, name}) to stop an empty one.
      type: dict
      returned: when the action creates, sets or stops a slice
      contains:
        op:
          description: V(apply) (create the slice or set its limits again) or V(remove) (stop an empty one).
          type: str
        name:
          description: The slice unit, C(bcd-alloc-<allocation>.slice).
          type: str
        properties:
          description: The C(systemctl set-property) settings the hold's limits make; a limit not set sets none.
          type: dict
          returned: for V(apply)
          contains:
            AllowedCPUs:
              description: The assignment's C(limits.cpus).
              type: str
              returned: when the limits set it
            AllowedMemoryNodes:
              description: The assignment's C(limits.mems).
              type: str
              returned: when the limits set it
            CPUQuota:
              description: The assignment's C(limits.cpu_millis) as whole percents of one CPU, rounded up (V(124%)).
              type: str
              returned: when the limits set it
            MemoryMax:
              description: The assignment's C(limits.memory_bytes), in bytes.
              type: str
              returned: when the limits set it
            MemoryHigh:
              description: Nine tenths of C(MemoryMax), in bytes.
              type: str
              returned: when the limits set it
        hugetlb_max:
          description: >-
            The huge page limits, in bytes, keyed by page size: C(2MB) for the 2 MiB pages and C(1GB) for the
            1 GiB pages the limits book, each only when they book some (empty when they book none). A key that
            starts with a digit is read with brackets, C(step.slice.hugetlb_max['1GB']), not with a dot.
          type: dict
          returned: for V(apply)
    locality:
      description: >-
        For a V(bind) or V(rebind) whose C(limits.cpus) or C(limits.mems) lie outside the NUMA nodes of its
        GPUs: what lies outside; its C(text) ends with the same. Never a refusal: the hold is bound as booked
        (placement is the control plane's), and the task warns once for all such holds of the pass.
        docs/slices-and-admission.md, "NUMA locality".
      type: dict
      returned: when the hold's cpus or mems are not local to its GPUs
      contains:
        gpu_numa_nodes:
          description: The NUMA nodes of the hold's GPUs (NVML, sysfs or the fakehw file say).
          type: list
          elements: int
        local_cpus:
          description: The CPUs of those nodes, as a cpulist.
          type: str
        remote_cpus:
          description: Its C(cpus) outside those CPUs, as a cpulist; null when every one is local.
          type: str
        remote_mems:
          description: Its C(mems) other than those nodes, as a cpulist; null when none is.
          type: str
        text:
          description: The same in one line.
          type: str
  sample:
    - action: bind
      allocation_id: alloc_01jz8k2v
      text: "bind alloc_01jz8k2v: bcd.dev/gpu=GPU-5f1c... -> /etc/cdi/bcd-alloc_01jz8k2v.json, ..."
      device_ids: [GPU-5f1c2a90-0000-4000-8000-000000000001]
      files:
        - {path: /etc/cdi/bcd-alloc_01jz8k2v.json, change: create}
        - {path: /run/bcd/allocations/alloc_01jz8k2v.env, change: create}
      event: AllocationBound
section:
  description: The state of the node's devices section after the pass.
  returned: always
  type: dict
  contains:
    state:
      description: V(CONVERGED), V(PROGRESSING) (a retryable write failed) or V(FAILED) (some assignment refused).
      type: str
    generation:
      description: The generation of this pass.
      type: int
    observed_generation:
      description: The last generation the node finished; it does not advance while V(PROGRESSING).
      type: int
    message:
      description: "For V(FAILED), C(<allocation>: <message>) for each refusal, joined by C(; ); for V(PROGRESSING), the errors."
      type: str
failures:
  description: Every assignment refused in this pass.
  returned: always
  type: list
  elements: dict
  contains:
    allocation_id:
      description: The allocation refused (C(devices[N]) when the entry had no usable id).
      type: str
    generation:
      description: The generation it was refused at.
      type: int
    reason:
      description: >-
        V(unsupported-binding), V(node-unprivileged), V(unsupported-device), V(device-missing), V(overlap),
        V(resources-exhausted) or V(invalid-assignment).
      type: str
    message:
      description: Why, in one line.
      type: str
  sample:
    - {allocation_id: alloc_x, generation: 42, reason: overlap,
       message: GPU-5f1c2a90-0000-4000-8000-000000000001 is assigned to alloc_01jz8k2v}
events:
  description:
    - The events this pass journaled, after the oldest of those not yet acknowledged from earlier passes, at most
      16 of them (RV(events_not_shown) counts the rest), oldest first.
    - When the task fails (a refusal with O(on_refusal=fail), or a pass that is retried), only the events this
      pass journaled (none in check mode); the older ones are counted in RV(events_not_shown) and
      RV(events_elsewhere) says where to read them, so a failure shows the failure.
    - So a task's printed result does not grow with the journal's age; M(bcd.devices.events) returns every
      unacknowledged event, and the role's delivery reads them there.
  returned: always
  type: list
  elements: dict
  contains:
    seq:
      description: The event's sequence number; it grows by one per event and is never reused.
      type: int
    type:
      description: V(AllocationBound), V(AllocationReleased) or V(AllocationFailed).
      type: str
    body:
      description: What the event reports; its fields by event type are below and in docs/events.md.
      type: dict
      contains:
        node_id:
          description: The node that journaled the event.
          type: str
        allocation_id:
          description: The allocation the event is about.
          type: str
        generation:
          description: The generation of the pass that journaled it.
          type: int
        boot_id:
          description: The node's boot the hold was bound or released in.
          type: str
          returned: for AllocationBound and AllocationReleased
        device_ids:
          description: The atoms bound or released.
          type: list
          elements: str
          returned: for AllocationBound and AllocationReleased
        cdi_devices:
          description: The fully qualified CDI device names of the hold.
          type: list
          elements: str
          returned: for AllocationBound
        cdi_spec_path:
          description: The hold's CDI spec.
          type: str
          returned: for AllocationBound
        env_file:
          description: The hold's env file.
          type: str
          returned: for AllocationBound
        cgroup_parent:
          description: The hold's slice.
          type: str
          returned: for AllocationBound of a hold with a slice
        reason:
          description: Why the allocation was refused (V(overlap), V(device-missing), ...).
          type: str
          returned: for AllocationFailed
        message:
          description: Why, in one line.
          type: str
          returned: for AllocationFailed
    purpose:
      description: V(attested-report), on attested events (binds and releases).
      type: str
      returned: for AllocationBound and AllocationReleased
    signature:
      description: Base64 Ed25519 signature by the node key; check it with P(bcd.devices.verify_report#filter).
      type: str
      returned: for AllocationBound and AllocationReleased
events_not_shown:
  description:
    - How many unacknowledged events from earlier passes RV(events) leaves out (0 when it carries them all); when
      the task fails, every one of them.
    - M(bcd.devices.events) lists them.
  returned: always
  type: int
  sample: 0
events_elsewhere:
  description:
    - On a failed task whose RV(events) leaves out older unacknowledged events, how many it leaves out and where to
      read them, in one line; M(bcd.devices.events) returns them all, C(bcd-holds events) lists them on the node.
  returned: when the task failed and unacknowledged events of earlier passes are left out
  type: str
  sample: "34 unacknowledged events of earlier passes not shown: bcd.devices.events lists them all (bcd-holds events on
    the node)"
holds:
  description: The holds on the node after the pass (in check mode, as they would be).
  returned: always
  type: list
  elements: dict
  contains:
    allocation_id:
      description: The allocation.
      type: str
    reservation_id:
      description: Its reservation.
      type: str
    generation:
      description: The generation the hold was bound at.
      type: int
    binding:
      description: V(BINDING_HOLD) or V(BINDING_KUBERNETES).
      type: str
    device_ids:
      description: Its atoms.
      type: list
      elements: str
    cdi_devices:
      description: The fully qualified CDI device names, C(bcd.dev/gpu=<atom id with / as _>).
      type: list
      elements: str
    cdi_spec_path:
      description: Its CDI spec.
      type: str
    env_file:
      description: Its env file.
      type: str
    cgroup_parent:
      description: The hold's slice, for a plain hold with limits.
      type: str
      returned: when the hold has a slice
conditions:
  description:
    - Node conditions about holds, each C(type), C(status), C(reason) and C(message).
    - V(KubernetesReleaseStuck) (reason V(PodsHoldDevices)) while a Kubernetes release has waited over five
      minutes for pods; V(KubernetesReleasesUnreadable) (reason V(ReleasesFileUnreadable)) while every GPU is
      claimed because C(releasing.json) could not be read.
    - V(HoldChangeRefused) (reason V(KeptAsBound)), one per allocation, while a live hold's new assignment is
      refused and the node keeps the hold as it was bound, on the devices in C(device_ids) - new limits, binding
      or input refused, or a move to other GPUs whose C(cpus)/C(mems) would narrow the slice its workload still
      runs in (nothing is released). The refusal is also in RV(failures), and no C(AllocationFailed) is
      journaled for it; every pass judges it again, and it clears once the hold takes its assignment or goes.
    - V(VendorSpecUnsupported) (reason V(UnknownCdiVersion)) while NVIDIA's CDI spec has a C(cdiVersion) no hold
      can be written at (later than any this bcd knows, or one no CDI release defines) and the runtimes do not
      lower it; every bind is retried until it is regenerated.
  returned: always
  type: list
  elements: dict
  contains:
    type:
      description: >-
        V(KubernetesReleaseStuck), V(KubernetesReleasesUnreadable), V(HoldSpecDamaged) (damaged hold specs set
        aside), V(VendorSpecStale) (NVIDIA's CDI spec does not match the node), V(VendorSpecUnsupported),
        V(HoldChangeRefused), V(GPUUnhealthy), V(GPUResetIneffective) or V(GPURecoveryStalled).
      type: str
    status:
      description: V(True) while the condition holds; a condition that no longer holds is not returned.
      type: str
    reason:
      description: >-
        One word for why - V(PodsHoldDevices), V(ReleasesFileUnreadable), V(SpecUnreadable),
        V(NodeDiffersFromSpec), V(UnknownCdiVersion), V(KeptAsBound), V(GPUFaulted), V(ResetIneffective) or
        V(RecoveryStalled).
      type: str
    message:
      description: What is wrong and what to do, in one line.
      type: str
    allocation_id:
      description: The allocation whose hold is kept as bound.
      type: str
      returned: for V(HoldChangeRefused)
    device_ids:
      description: The devices the kept hold still holds (the control plane must not place another allocation on them).
      type: list
      elements: str
      returned: for V(HoldChangeRefused)
pending_releases:
  description:
    - Kubernetes releases still waiting for pods to let go of their devices, with their age and C(held_by)
      (the pods and processes, or null when the kubelet cannot be asked).
    - C(taken_back) is true for the old devices of an allocation the spec wants again, on other devices or
      as a plain hold. They stay claimed while pods hold them and are dropped, never reported, once free.
  returned: always
  type: list
  elements: dict
  contains:
    allocation_id:
      description: The Kubernetes allocation being released.
      type: str
    device_ids:
      description: The atoms still claimed for it.
      type: list
      elements: str
    generation:
      description: The generation the release was started at.
      type: int
    age_seconds:
      description: How long the release has waited, in seconds.
      type: int
    taken_back:
      description: Whether these are old devices of an allocation the spec wants again.
      type: bool
    held_by:
      description: The pods and processes that hold the devices, or null when the kubelet cannot be asked.
      type: list
      elements: str
  sample:
    - {allocation_id: alloc_k8s, device_ids: [GPU-5f1c2a90-0000-4000-8000-000000000003], generation: 43,
       age_seconds: 42, taken_back: false, held_by: [default/train-0 (main)]}
capabilities:
  description:
    - What the node can honour (V(cdi), V(devices.limits), V(binding.kubernetes), V(nvml)).
    - None that needs root on an unprivileged node; no V(devices.limits) where systemd with cgroup v2 cannot make slices.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils import basic

from ansible_collections.bcd.devices.plugins.module_utils.support import speed

speed.compile_once()  # first: the rest of the collection compiles once from Ansible's zip (docs/performance.md)

from ansible_collections.bcd.devices.plugins.module_utils.entry.modules import holds as module_code


def main() -> None:
    module_code.main(basic)


if __name__ == "__main__":
    main()
