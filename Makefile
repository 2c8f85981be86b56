# `make report` and `make test` each set up .venv (when missing or stale) and run.
PYTHON ?= python3
VENV ?= .venv
EXTRAS ?= dev
PYTEST_ARGS ?=
comma := ,
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))

.PHONY: setup test report lint clean

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt tools/setup-venv.sh
	sh tools/setup-venv.sh "$(PYTHON)" "$(VENV)" "$(EXTRAS)"
	touch $@

test: setup
	$(BIN)/python -m pytest $(PYTEST_ARGS)

report: setup
	mkdir -p report
	$(BIN)/posenc verify --out report/flat_lines.png
	$(BIN)/posenc verify --json > report/verify.json
	@echo "report written: report/flat_lines.png, report/verify.json"

lint: setup
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests

clean:
	rm -rf $(VENV) report .pytest_cache .hypothesis
