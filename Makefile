# bcd.devices: set up the toolchain, lint, test, demo.
#
#   make test   what CI runs (.ci/run): venv, lint, units, sanity, molecule, e2e, in order (the e2e's
#               root filesystems built beside them),
#               stopping at the first failure
#   make demo   the fakehw demo (hack/demo.sh)
#
# Everything runs from .venv (Python 3.11, pins in pyproject.toml and
# requirements/constraints.txt) and writes only under .venv and .build; nothing is read
# from or written to the user's ~/.ansible.

SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help
.NOTPARALLEL:
MAKEFLAGS += --no-builtin-rules --no-builtin-variables

# The interpreter that creates .venv; it must be Python 3.11.
PYTHON ?= $(or $(shell command -v python3.11 2>/dev/null),/usr/bin/python3.11)

VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
STAMP := $(VENV)/.installed
BUILD := $(CURDIR)/.build
# .build/ansible_collections/bcd/devices -> this checkout: makes the collection
# importable as ansible_collections.bcd.devices (pytest, ansible, molecule).
LINK := .build/ansible_collections/bcd/devices

# nox runs the sessions of noxfile.py (antsibull-nox's among them) from .venv, with this checkout's venv and
# .build: make lint, units and sanity call it (nox --list shows the sessions).
NOX := VENV=$(VENV) BUILD=$(BUILD) $(BIN)/nox

# Ansible tools run from the venv with a private ANSIBLE_HOME and find this collection
# through the link above.
ANSIBLE_ENV := PATH="$(BIN):$$PATH" ANSIBLE_HOME="$(BUILD)/ansible-home" ANSIBLE_COLLECTIONS_PATH="$(BUILD)"

.PHONY: help venv lint units sanity molecule demo e2e e2e-prepare bench fuzz soak canary test clean distclean

help:
	@echo "make venv      create .venv with the pinned toolchain (only when the pins change)"
	@echo "make lint      target-Python check, ruff and mypy of plugins, ansible-lint, antsibull-nox's extra checks, no checkout path in docs, shellcheck"
	@echo "make units     nox -s units: pytest on tests/unit under ansible-core 2.19 and 2.22, the tests that drive Ansible (install, action) under 2.20 and 2.21 too (PYTEST_ARGS=..., CORES=...)"
	@echo "make sanity    nox -s sanity-<release>: ansible-test sanity under ansible-core 2.19, 2.20, 2.21 and 2.22, two at a time, and its compile test on every target Python 3.8 to 3.13 (SANITY_ARGS=..., CORES=...)"
	@echo "make molecule  every Molecule scenario under 2.19, and default and role (MOLECULE_NEWEST=...) under 2.22"
	@echo "make demo      hack/demo.sh: the fakehw demo (DEMO_CORE=2.22 runs it under 2.22)"
	@echo "make e2e       hack/e2e.sh: podman 5 and the CDI library consume converged specs (root)"
	@echo "make bench     hack/bench.py: pass times next to Ansible's own for the same work (ad-hoc, fleets of 50 and 500 hosts, the role's re-run), each ratio the median of its rounds' own (3 rounds; --strict: 5, exit 1 on a miss; BENCH_ARGS=...)"
	@echo "make fuzz      hack/fuzz.py: 10 000 generated inputs at every parser root runs, per target (FUZZ_ARGS=...)"
	@echo "make soak      the model-based test of the converger's invariants, long: SOAK_EXAMPLES=2000 random runs, shrunk on failure"
	@echo "make canary    the install test and ansible-test sanity under the newest ansible-core the package index serves, pre-releases included (not in make test)"
	@echo "make test      venv, lint, units, sanity, molecule, e2e (what .ci/run runs); stops at the first failure"
	@echo "make clean     remove .build and test output; make distclean also removes .venv"

venv: $(STAMP)

$(STAMP): pyproject.toml requirements/constraints.txt hack/test_requirements.py
	@if [[ ! -x $(VENV)/bin/python ]]; then \
	  "$(PYTHON)" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' || { \
	    echo "venv: $(PYTHON) is not Python 3.11; run make PYTHON=/path/to/python3.11" >&2; exit 1; }; \
	  echo "venv: creating $(VENV) with $(PYTHON)"; \
	  "$(PYTHON)" -m venv $(VENV); \
	fi
	@$(VENV)/bin/python -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' || { \
	  echo "venv: $(VENV) is not Python 3.11; run make distclean first" >&2; exit 1; }
	$(VENV)/bin/python hack/test_requirements.py pyproject.toml test > $(VENV)/requirements-test.txt
	$(VENV)/bin/python -m pip install --quiet --disable-pip-version-check --no-input \
	  -r $(VENV)/requirements-test.txt -c requirements/constraints.txt
	@touch $@

$(LINK):
	mkdir -p $(@D)
	ln -sfn ../../.. $@

lint: $(STAMP) | $(LINK)
	$(BIN)/python hack/check_target_python.py --no-ansible plugins/module_utils plugins/modules
	$(BIN)/ruff check --no-cache plugins
	cd $(BUILD) && $(BIN)/mypy --config-file $(CURDIR)/pyproject.toml --cache-dir $(BUILD)/mypy-cache
	$(ANSIBLE_ENV) ansible-lint --offline
	$(NOX) -s extra-checks
	VENV=$(VENV) BUILD=$(BUILD) bash hack/galaxy_checks.sh
	$(BIN)/python hack/check_docs.py
	bash hack/shellcheck.sh

# The ansible-core releases this collection supports and tests, oldest first (docs/compatibility.md has the
# table; meta/runtime.yml sets only the floor, 2.19). 2.19 is .venv's; 2.20, 2.21 and 2.22 each have their own
# venv, on Python 3.12, 3.13 and 3.13, .build/venvs/ansible-core-<version> (hack/core_venv.sh and
# hack/tool_venv.sh; pins and Python in requirements/tools/), made on first use. make units runs under the oldest
# and the newest (and the install test under every one), make sanity under every one (each with the compile test
# on every target Python it supports, 3.8 to 3.13), make molecule every scenario under 2.19 and those in
# MOLECULE_NEWEST under the newest: CORES=2.22 (or UNITS_CORES=, SANITY_CORES=) narrows.
CORES ?= 2.19 2.20 2.21 2.22
UNITS_CORES ?= $(sort $(firstword $(CORES)) $(lastword $(CORES)))
SANITY_CORES ?= $(CORES)
MOLECULE_NEWEST ?= default role

# noxfile.py's units session: pytest on two workers under each release of UNITS_CORES (the passes after the
# first leave out the module_utils tests that run no Ansible code), and the tests that drive Ansible itself
# (DRIVE_TESTS: the install test, the ansible-runner job, the action plugins' playbooks) under each release of
# CORES between them. PYTEST_ARGS=... replaces "-n 2" and leaves out the passes between, e.g.
# PYTEST_ARGS="-q tests/unit/x.py"; DRIVE_CORES=... and DRIVE_TESTS=... override the noxfile's choice.
PYTEST_ARGS ?=
units: $(STAMP) | $(LINK)
	CORES="$(CORES)" UNITS_CORES="$(UNITS_CORES)" DRIVE_CORES="$(DRIVE_CORES)" DRIVE_TESTS="$(DRIVE_TESTS)" \
	  $(NOX) -s units $(if $(PYTEST_ARGS),-- $(PYTEST_ARGS))

# One nox session per release (noxfile.py's sanity-<release>), SANITY_JOBS at a time (nox --parallel, each
# release's output printed whole when it ends), each then the compile test on every target Python; SANITY_ARGS
# go to ansible-test and skip that compile pass.
SANITY_JOBS ?= 2
sanity: $(STAMP)
	$(NOX) --parallel $(SANITY_JOBS) -s $(addprefix sanity-,$(SANITY_CORES)) $(if $(SANITY_ARGS),-- $(SANITY_ARGS))

molecule: $(STAMP) | $(LINK)
	VENV=$(VENV) BUILD=$(BUILD) bash hack/molecule.sh $(MOLECULE_ARGS)
	@if [[ -z "$(MOLECULE_ARGS)" && "$(lastword $(CORES))" != 2.19 ]]; then \
	  for scenario in $(MOLECULE_NEWEST); do \
	    echo "molecule: scenario $$scenario under ansible-core $(lastword $(CORES))"; \
	    MOLECULE_CORE=$(lastword $(CORES)) VENV=$(VENV) BUILD=$(BUILD) bash hack/molecule.sh -s $$scenario; \
	  done; \
	fi

bench: $(STAMP) | $(LINK)
	$(BIN)/python hack/bench.py $(BENCH_ARGS)

# Hostile inputs at every parser root runs (docs/security.md, "The fuzzer"); exit 1 on any failure, each
# printed with the command that replays it. A short run of it is a unit test (tests/unit/hack/test_fuzz.py).
# FUZZ_ARGS=... e.g. "--target ledger.json --count 50000", "--seed 123", "--list".
FUZZ_ARGS ?=
fuzz: $(STAMP) | $(LINK)
	$(BIN)/python hack/fuzz.py $(FUZZ_ARGS)

# The model-based tests of the invariants (tests/unit/plugins/module_utils/entry/test_model_invariants.py, the
# converger's, and test_model_helper.py, root's helper with a hostile account; docs/architecture.md "The
# model-based test"): make units runs a short derandomized run of each, this a long run of SOAK_EXAMPLES fresh
# random ones each (profile soak), shrinking a failure to a minimal sequence of steps.
SOAK_EXAMPLES ?= 2000
soak: $(STAMP) | $(LINK)
	BCD_MODEL_PROFILE=soak SOAK_EXAMPLES=$(SOAK_EXAMPLES) $(BIN)/python -m pytest -q -p no:cacheprovider \
	  tests/unit/plugins/module_utils/entry/test_model_invariants.py \
	  tests/unit/plugins/module_utils/entry/test_model_helper.py

# hack/demo.sh runs with the venv's bin first on PATH and ANSIBLE_HOME and
# ANSIBLE_COLLECTIONS_PATH set as for the other Ansible tools.
demo: $(STAMP) | $(LINK)
	@if [[ ! -f hack/demo.sh ]]; then echo "demo: hack/demo.sh is missing" >&2; exit 1; fi
	$(ANSIBLE_ENV) VENV=$(VENV) BUILD=$(BUILD) DEMO_CORE=$(DEMO_CORE) bash hack/demo.sh $(DEMO_ARGS)

e2e: $(STAMP) | $(LINK)
	@if [[ -f $(BUILD)/e2e-prepare.log ]]; then echo "e2e: make test's preparation ($(BUILD)/e2e-prepare.log) said:"; \
	  tail -n 3 $(BUILD)/e2e-prepare.log; fi
	bash hack/e2e.sh $(E2E_ARGS)

# hack/canary.sh: the next ansible-core before it has its row in docs/compatibility.md ("The next
# release"), in a throwaway venv, .build/venvs/canary. Not a prerequisite of test: upstream moves
# under it (a new beta or release candidate any day), and CI must answer the same for the same commit.
canary: $(STAMP) | $(LINK)
	VENV=$(VENV) BUILD=$(BUILD) bash hack/canary.sh

test: venv lint units sanity molecule e2e

# make test starts the e2e's cold work (hack/e2e.sh --prepare: root filesystems, the checker, the rulebook venv)
# in the background, as root, before lint; it runs beside lint, units, sanity and molecule, and make e2e waits
# for it (e2e.sh's lock). Its log is $(BUILD)/e2e-prepare.log; if it failed, make e2e builds what is missing
# itself and says why. Only under make test: make lint alone starts nothing.
ifneq ($(filter test,$(MAKECMDGOALS)),)
lint: | e2e-prepare
endif

e2e-prepare: $(STAMP) | $(LINK)
	@if [[ $$(id -u) == 0 ]]; then \
	  mkdir -p $(BUILD); \
	  echo "test: preparing the e2e beside the other stages ($(BUILD)/e2e-prepare.log)"; \
	  nohup bash hack/e2e.sh --prepare > $(BUILD)/e2e-prepare.log 2>&1 < /dev/null & \
	fi

clean:
	rm -rf .build tests/output .ansible .pytest_cache
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)
