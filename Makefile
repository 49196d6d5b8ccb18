# sparklog: every target sets itself up (virtual environment, packages, Delta jars).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.stamp-install

.PHONY: demo test test-fast bench bench-quick clean chromium console-screenshots

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)  ## run the demo on the embedded local store
	$(BIN)/sparklog demo

# The web console's browser tests drive Debian's chromium; install it when it is missing
# (root, as CI runs). If apt-get cannot, those tests skip and say why.
chromium:  ## Debian's chromium and chromium-driver, for tests/ingest_gateway/test_console.py
	@if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then \
	  echo "installing chromium and chromium-driver (apt-get)"; \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	      chromium chromium-driver >/dev/null; } \
	  || echo "chromium could not be installed: the console's browser tests will skip"; \
	fi

console-screenshots: $(STAMP) chromium  ## the README's console pictures, into docs/console/
	SPARKLOG_CONSOLE_SCREENSHOTS=docs/console $(BIN)/python -m pytest -q tests/ingest_gateway/test_console.py

test: $(STAMP) chromium  ## run the whole test suite (Spark, Delta, S3 server, crash tests)
	$(BIN)/python -m pytest -q

test-fast: $(STAMP) chromium  ## skip the slow tests
	$(BIN)/python -m pytest -q -m 'not slow'

bench-quick: $(STAMP)  ## every benchmark, small
	for b in bench/*.py; do grep -q '__main__' $$b || continue; $(BIN)/python $$b --quick || exit 1; done

bench: $(STAMP)  ## every benchmark, full size (minutes)
	for b in bench/*.py; do grep -q '__main__' $$b || continue; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) .ivy2 sparklog-data spark-warehouse metastore_db derby.log
