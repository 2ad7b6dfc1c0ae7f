# `make demo` and `make test` each create .venv when it is missing, install the project into it
# (pinned by pyproject.toml and constraints.txt), and run.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast test-real-k8s real-k8s soak check bench clean

# The installer is uv (pinned in constraints.txt; pip installs it, 1 s): it resolves, fetches and unpacks the pinned
# set in about 7 s where pip takes 42 s here. The demo's commands compile what they import (about 3,800 of the
# installed 16,000 modules) when they first import it, and keep it; the tests, which import most of them on two
# workers at once, have them compiled up front on both cores first (21 s, once). Where the machine sets
# PYTHONDONTWRITEBYTECODE (the development machine does), nothing compiled on import would be kept and every command
# would compile its imports afresh (canary runners then started too late for their gates): make's commands run without
# it. Where uv cannot be installed, pip does the install.
unexport PYTHONDONTWRITEBYTECODE
COMPILED := $(VENV)/.compiled
$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	if $(BIN)/python -m pip install --quiet -c constraints.txt uv; then \
	  $(BIN)/uv pip install --python $(BIN)/python --quiet -c constraints.txt -e '.[test]'; \
	else \
	  $(BIN)/python -m pip install --quiet --no-compile -c constraints.txt -e '.[test]'; \
	fi
	touch $(STAMP)

# A module that does not compile (a package's file for another Python) is skipped, as pip skips it.
$(COMPILED): $(STAMP)
	$(BIN)/python -m compileall -q -j 2 "$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" > /dev/null || true
	touch $(COMPILED)

demo: $(STAMP)
	$(BIN)/platformctl demo --stage dev
	$(BIN)/platformctl demo-pipeline

# Debian's chromium for the dashboard's browser tests (installed when missing), the in-process tests on two workers,
# then the process tests on two workers a module at a time, the long modules first (tests/conftest.py): each module
# starts a local region server of its own, whose clock skips what nobody waits through and is held for a client that
# works (platformctl/emulator/server/timekeeper.py), so that two regions on two cores slow each other down but never
# run away from their clients.
test: $(STAMP) $(COMPILED)
	scripts/ensure-chromium
	$(BIN)/python -m pytest -n 2 -m "not process and not real_k8s"
	$(BIN)/python -m pytest -n 2 --dist loadfile --no-loadscope-reorder -m "process and not real_k8s" --durations=15

# The everyday loop: the in-process tests only (no local region server, no killed processes).
test-fast: $(STAMP) $(COMPILED)
	$(BIN)/python -m pytest -n 2 -m "not process and not slow and not real_k8s"

# The real control plane's binaries: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok at the
# versions scripts/real-k8s/*/go.mod pin, built with Go from the Go module proxy into ~/.cache/platformctl/real-k8s
# (PLATFORMCTL_REAL_K8S_CACHE), once per machine and pin: about 12 minutes cold on 2 cores, a second warm.
real-k8s:
	scripts/real-k8s/build.sh

# The tests against that real control plane (tests/real_k8s).
test-real-k8s: $(STAMP) $(COMPILED) real-k8s
	$(BIN)/python -m pytest -m real_k8s tests/real_k8s --durations=10

# The release pipeline's random model (tests/release_pipeline/model.py) over many seeded histories, on every core; a
# failing seed is printed, and `$(BIN)/python -m tests.release_pipeline.model --seed S` replays it. HISTORIES=N to
# change how many (make test runs 12).
HISTORIES ?= 10000
soak: $(STAMP)
	$(BIN)/python -m tests.release_pipeline.model --histories $(HISTORIES)

check: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports

bench: $(STAMP)
	$(BIN)/python benchmarks/resolve_manifests.py
	$(BIN)/python benchmarks/plan_rotation.py
	$(BIN)/python benchmarks/rotate_full_cluster.py
	$(BIN)/python benchmarks/rotate_run.py
	$(BIN)/python benchmarks/rotate_faults.py
	$(BIN)/python benchmarks/live_memory.py
	$(BIN)/python benchmarks/rotate_run_memory.py
	$(BIN)/python benchmarks/judge_aa.py
	$(BIN)/python benchmarks/canary_detect.py
	$(BIN)/python benchmarks/dashboard.py
	$(BIN)/python benchmarks/gate_window.py
	$(BIN)/python benchmarks/release_tick.py
	$(BIN)/python benchmarks/release_records.py

clean:
	rm -rf $(VENV) .platformctl .pytest_cache
