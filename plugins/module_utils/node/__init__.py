# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node: the one small host interface a pass reads and writes through.

``hosts`` defines it, with a real GPU host and a fakehw host (a directory and a
hardware file); ``writers`` decides whether root's work is done here or through
the root helper (``helper_client``). Beneath them: the GPU inventory (NVML,
``nvidia-smi``, libvirt in ``inventory``; the fakehw file in ``fakehw``), host
memory (``memory``), slice backends (``slices``), the kubelet's pod-resources API
(``kubelet`` and its generated gRPC stubs) and crash-safe file helpers
(``fsutil``). This layer imports only the domain.
"""
