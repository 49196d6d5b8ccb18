# sparklog: every target sets itself up (virtual environment, packages, Delta jars).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.stamp-install

.PHONY: demo test test-fast bench bench-quick clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)  ## run the demo on the embedded local store
	$(BIN)/sparklog demo

test: $(STAMP)  ## run the whole test suite (Spark, Delta, S3 server, crash tests)
	$(BIN)/python -m pytest -q

test-fast: $(STAMP)  ## skip the slow tests
	$(BIN)/python -m pytest -q -m 'not slow'

bench-quick: $(STAMP)  ## every benchmark, small
	for b in bench/*.py; do grep -q '__main__' $$b || continue; $(BIN)/python $$b --quick || exit 1; done

bench: $(STAMP)  ## every benchmark, full size (minutes)
	for b in bench/*.py; do grep -q '__main__' $$b || continue; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) .ivy2 sparklog-data spark-warehouse metastore_db derby.log
