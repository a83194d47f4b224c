# trilog: `make run` starts a broker on the embedded default; `make test` runs the whole suite.
# Both create .venv. `make run` installs what a broker needs and nothing more (no Spark, no
# test tools); `make test` adds the `spark` and `test` extras and makes sure a ZooKeeper,
# kcat and Chromium are installed.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# the package's build inputs: a change to any of them installs again
BUILD_INPUTS := pyproject.toml setup.py trilog/records/_speedups.c

.PHONY: install install-all compiler zookeeper kcat chromium run cluster test bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip

# A broker's install: trilog and its dependencies (editable: this is its repository).
$(VENV)/.installed: $(BUILD_INPUTS) | $(BIN)/python compiler
	$(BIN)/pip install -e .
	touch $@

# Everything: the Spark data source's pyspark and pyarrow, and the tools the tests use.
$(VENV)/.installed-all: $(BUILD_INPUTS) | $(BIN)/python compiler
	$(BIN)/pip install -e '.[spark,test]'
	touch $(VENV)/.installed $@

# trilog's optional C module needs a C compiler and Python's headers: install Debian's when
# they are missing (if that fails, the install goes on and trilog runs in pure Python).
compiler:
	@command -v cc >/dev/null && $(PYTHON) -c "import os, sys, sysconfig; \
	  sys.exit(not os.path.exists(os.path.join(sysconfig.get_path('include'), 'Python.h')))" || { \
	  echo "installing a C compiler and Python's headers (for trilog's C module)"; \
	  $(SUDO) apt-get update && $(SUDO) apt-get install -y gcc python3-dev || \
	  echo "could not install them: trilog will run its pure-Python code"; }

install: $(VENV)/.installed

install-all: $(VENV)/.installed-all zookeeper

# ZooKeeper (for clusters and the tests) comes from ZOOKEEPER_HOME, Debian's package, or the
# jars in the pyspark wheel; install Debian's package only when none of those is there.
zookeeper: $(VENV)/.installed
	@$(BIN)/trilog zookeeper --check || { \
	  echo "installing Debian's zookeeper package"; \
	  $(SUDO) apt-get update && $(SUDO) apt-get install -y zookeeper; \
	  $(BIN)/trilog zookeeper --check; }

# Chromium and its WebDriver (Debian's packages), for the console's browser tests.
chromium:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || { \
	  echo "installing Debian's chromium and chromium-driver (for the console's tests)"; \
	  $(SUDO) apt-get update && $(SUDO) apt-get install -y chromium chromium-driver; }

# kcat (Debian's package), one of the independent Kafka clients the tests check trilog with.
kcat:
	@command -v kcat >/dev/null || { \
	  echo "installing Debian's kcat package (for the tests)"; \
	  $(SUDO) apt-get update && $(SUDO) apt-get install -y kcat; }

# The main job: one standalone broker on 127.0.0.1:9092, data in ./trilog-data (Ctrl-C stops it).
run: install
	$(BIN)/trilog broker

# A local cluster: ZooKeeper and three brokers, data in ./trilog-cluster (Ctrl-C stops it).
cluster: install zookeeper
	$(BIN)/trilog cluster --brokers 3

# The suite runs on TEST_WORKERS processes (pytest-xdist; tests/conftest.py schedules each
# test module whole on one of them, the Spark modules together): most tests wait on brokers,
# ZooKeeper or Spark (on two workers the suite kept about one core busy), so three workers
# fit two cores.
TEST_WORKERS ?= 3
test: install-all kcat chromium
	$(BIN)/python -m pytest -n $(TEST_WORKERS)

bench: install-all
	$(BIN)/python benchmarks/storage_append.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis trilog.egg-info
