# sparklog: every target sets itself up (virtual environment, packages, Delta jars).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.stamp-install

.PHONY: demo test test-fast bench bench-quick clean chromium kcat console-screenshots

$(STAMP): pyproject.toml setup.py ingest_gateway/kafka/_records_c.c
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)  ## run the demo on the embedded local store
	$(BIN)/sparklog demo

# The web console's browser tests drive Debian's chromium; install it when it is missing
# (root, as CI runs). If apt-get cannot, those tests skip and say why.
chromium:  ## Debian's chromium and chromium-driver, for tests/ingest_gateway/http/test_console.py
	@if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then \
	  echo "installing chromium and chromium-driver (apt-get)"; \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	      chromium chromium-driver >/dev/null; } \
	  || echo "chromium could not be installed: the console's browser tests will skip"; \
	fi

# kcat (and the librdkafka and yajl it links) from Debian's packages, unpacked into
# .cache/kcat without installing them (no root needed); .cache/kcat/kcat runs it. If
# apt-get cannot download them, tests/ingest_gateway/kafka/test_kcat.py skips and says why.
KCAT_DIR := .cache/kcat
kcat:  ## Debian's kcat, unpacked into .cache/kcat, for tests/ingest_gateway/kafka/test_kcat.py
	@if [ ! -x $(KCAT_DIR)/kcat ]; then \
	  echo "fetching kcat, librdkafka1, libyajl2 (apt-get download) into $(KCAT_DIR)"; \
	  rm -rf $(KCAT_DIR).tmp && mkdir -p $(KCAT_DIR).tmp/debs && \
	  (cd $(KCAT_DIR).tmp/debs && { apt-get download -qq kcat librdkafka1 libyajl2 2>/dev/null || \
	    { apt-get update -qq 2>/dev/null && apt-get download -qq kcat librdkafka1 libyajl2; }; }) && \
	  for d in $(KCAT_DIR).tmp/debs/*.deb; do dpkg-deb -x $$d $(KCAT_DIR).tmp/root; done && \
	  printf '#!/bin/sh\nd=$$(dirname "$$0")/root\nLD_LIBRARY_PATH="$$d/usr/lib/x86_64-linux-gnu$${LD_LIBRARY_PATH:+:$$LD_LIBRARY_PATH}" exec "$$d/usr/bin/kcat" "$$@"\n' \
	    > $(KCAT_DIR).tmp/kcat && chmod +x $(KCAT_DIR).tmp/kcat && \
	  $(KCAT_DIR).tmp/kcat -V >/dev/null && \
	  rm -rf $(KCAT_DIR) && mv $(KCAT_DIR).tmp $(KCAT_DIR) \
	  || { rm -rf $(KCAT_DIR).tmp; echo "kcat could not be fetched: tests/ingest_gateway/kafka/test_kcat.py will skip"; }; \
	fi

console-screenshots: $(STAMP) chromium  ## the README's console pictures, into docs/console/
	SPARKLOG_CONSOLE_SCREENSHOTS=docs/console $(BIN)/python -m pytest -q tests/ingest_gateway/http/test_console.py

# The suite runs on TEST_WORKERS pytest-xdist workers (README "Tests": most tests wait on a
# JVM, a server or a gateway subprocess, so more workers than cores pay). A group of tests
# sharing a module fixture runs on one worker (tests/conftest.py sets the groups and puts
# the slowest modules first: --no-loadscope-reorder keeps that order).
TEST_WORKERS ?= 4
XDIST := -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder
#: the inner loop: no Spark, S3, HDFS, Chromium, kcat or Kafka broker, nothing slow
FAST  := not slow and not spark and not s3 and not hdfs and not browser and not kcat and not kafka_broker

test: $(STAMP) chromium kcat  ## run the whole test suite (Spark, Delta, S3 server, crash tests)
	$(BIN)/python -m pytest -q $(XDIST) --durations=20

test-fast: $(STAMP)  ## the inner loop: local stores only, nothing slow, nothing to install
	$(BIN)/python -m pytest -q $(XDIST) -m '$(FAST)' --durations=10

bench-quick: $(STAMP)  ## every benchmark, small
	for b in bench/*.py; do grep -q '__main__' $$b || continue; $(BIN)/python $$b --quick || exit 1; done

bench: $(STAMP)  ## every benchmark, full size (minutes)
	for b in bench/*.py; do grep -q '__main__' $$b || continue; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) .ivy2 sparklog-data spark-warehouse metastore_db derby.log
