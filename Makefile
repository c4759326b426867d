# Two entry points: `make demo` and `make test`. Both create the virtual
# environment on first use, so a fresh clone needs only Python >= 3.11.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: demo demo-real install test bench clean browser cel-tables toolchain

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python >= 3.11 is required (found %s)" % sys.version.split()[0])'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "installing modelplane and its dependencies into $(VENV) (the first run takes about 3 minutes on 2 cores: the Pulumi cloud SDKs are large)"
	@$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
	@touch $(STAMP)

# Only the virtual environment with modelplane in it (what `demo` and `test` start with; docs/ci/ runs this).
install: $(STAMP)

demo: $(STAMP)
	$(BIN)/modelplane validate -f examples/
	@echo
	$(BIN)/modelplane plan -f examples/
	@echo
	$(BIN)/modelplane render -f examples/ --out out/render
	@echo
	$(BIN)/modelplane preview --offline -f examples/ > out/preview.txt && tail -n 1 out/preview.txt
	@echo
	@$(MAKE) --no-print-directory demo-real

# The main job for real: the real Pulumi engine applies local-fleet/ to a local fleet of real control planes
# (simulated nodes and GPUs; docs/local-fleet.md). The first run builds the toolchain (about an hour on 2 cores).
DEMO_STATE := .modelplane/demo
demo-real: $(STAMP)
	@if ! $(PYTHON) tools/realengine/build.py; then \
	  echo "the real engine could not be built (above): the demo ends with the offline preview"; exit 0; fi; \
	set -e; export PULUMI_CONFIG_PASSPHRASE=demo; \
	echo; echo "$$ modelplane local up -f local-fleet/"; $(BIN)/modelplane local up -f local-fleet/ --state $(DEMO_STATE); \
	echo; echo "$$ modelplane up -f local-fleet/   (the real Pulumi CLI and Kubernetes provider)"; \
	$(BIN)/modelplane up -f local-fleet/ --state $(DEMO_STATE); \
	echo; echo "$$ modelplane status -f local-fleet/"; $(BIN)/modelplane status -f local-fleet/ --state $(DEMO_STATE); \
	echo; echo "$$ kubectl get pods -n ml-team -o wide   (local-a, then local-b: pods on simulated GPU nodes)"; \
	for c in local-a local-b; do .modelplane/toolchain/bin/kubectl --kubeconfig $(DEMO_STATE)/local/$$c/kubeconfig \
	  get pods -n ml-team -o wide; done; \
	echo; echo "the local fleet keeps running: $(BIN)/modelplane local down --state $(DEMO_STATE) stops it"

# The real-engine tier (tests/realengine, the contract test) runs the toolchain `make toolchain` builds.
test: $(STAMP) browser toolchain
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/python -m pytest

# The portal's browser, PostgreSQL and kubectl tests need Debian's chromium, chromium-driver, postgresql and
# kubernetes-client (kubectl); installed here when missing (as root, as on CI). Without them those tests fail and
# say what to install. Debian's kubectl (1.20, the oldest a user is likely to have) is also unpacked into the
# virtual environment, so the kubectl session runs with it as well as with the kubectl on PATH when that is newer.
DEBIAN_KUBECTL := $(VENV)/debian-kubectl/kubectl

browser: $(DEBIAN_KUBECTL)

$(DEBIAN_KUBECTL):
	@rm -rf $(VENV)/debian-kubectl.tmp && mkdir -p $(VENV)/debian-kubectl.tmp
	@if command -v apt-get >/dev/null 2>&1; then \
	  cd $(VENV)/debian-kubectl.tmp && { apt-get download -qq kubernetes-client >/dev/null 2>&1 || \
	    { [ "$$(id -u)" = "0" ] && apt-get update -qq >/dev/null && apt-get download -qq kubernetes-client >/dev/null; }; } && \
	  dpkg -x kubernetes-client_*.deb root && mkdir -p ../debian-kubectl && mv root/usr/bin/kubectl ../debian-kubectl/kubectl; \
	fi; rm -rf $(VENV)/debian-kubectl.tmp
	@test -x $@ || echo "note: Debian's kubernetes-client could not be unpacked into $(VENV)/debian-kubectl (the kubectl tests say so)"

	@if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1 || ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || ! command -v kubectl >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing chromium, chromium-driver, postgresql and kubernetes-client for the portal's tests"; \
	    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver postgresql \
	      $$(command -v kubectl >/dev/null 2>&1 || echo kubernetes-client) >/dev/null; \
	  else echo "note: install chromium, chromium-driver, postgresql and kubernetes-client (Debian packages) to run the portal's tests"; fi; \
	fi

# The real engine (docs/local-fleet.md): the Pulumi CLI, the Kubernetes provider, kube-apiserver,
# kube-controller-manager, kube-scheduler, etcd, kwok and the LeaderWorkerSet controller, built from the pinned Go
# modules in tools/realengine/ into a cache keyed by their go.sum (about an hour cold on 2 cores, seconds warm).
toolchain:
	$(PYTHON) tools/realengine/build.py

bench: $(STAMP)
	$(BIN)/python benchmarks/cel_bench.py
	$(BIN)/python benchmarks/plan_bench.py --scaling
	$(BIN)/python benchmarks/portal_load.py
	$(BIN)/python benchmarks/portal_compose.py
	$(BIN)/python benchmarks/operator_export.py
	$(BIN)/python benchmarks/fleet_scale.py

# celpy's CEL grammar analysed by Lark, shipped as data (fleet/cel_tables.py): after a celpy or Lark bump.
cel-tables: $(STAMP)
	$(BIN)/python -c 'from fleet.cel import write_tables; write_tables()'

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
