# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The domain: what a hold is and how a pass decides, with no I/O.

Assignments as they arrive (``assignment``), the atoms they name (``atoms``), who
already claims a GPU (``conflicts``), whether the host's memory admits a hold
(``admission``), the hold's CDI spec and env file (``cdi``, checked by
``cdi_validate``, fed by NVIDIA's vendor spec in ``cdi_vendor``), hold slices
(``slices``) and Kubernetes releases (``kube_release``), and the planner that
turns the wanted assignments and an observation of the host into an ordered list
of typed actions (``planner``, ``actions``). Nothing here imports the node, the
state or the entry points: every function is a function of its arguments, so the
whole converger is testable from hand-built observations.
"""
