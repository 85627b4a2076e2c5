# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Entry points: what the modules, ``bcd-holds`` and the root helper call.

``converge.run_pass`` is one pass (lock, observe, plan, apply, report) for the
module ``bcd.devices.holds`` and ``bcd-holds converge`` alike; ``status`` is what
``holds_info`` and ``bcd-holds status`` show; ``doctor`` checks a node; ``cli`` is
the ``bcd-holds`` command and ``helper`` its root helper. The modules in
``plugins/modules`` only parse options and call these. Nothing below imports
this layer.
"""
