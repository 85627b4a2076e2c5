# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node's state: what it remembers between passes, under ``<state_dir>``.

``store.NodeState`` owns every state file — the ledger of what was reported
(``ledger``), the pending Kubernetes releases and their unreadable marker
(``releases``), the stored input for the timers, the event journal and the node
key (``events``) — and is the only code that opens them: it loads them, saves
them atomically, and catches the ledger up with the journal after a crash. This
layer imports the domain and the node's file helpers.
"""
