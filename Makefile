# The two commands: `make up` runs the appliance, `make test` passes the tests.
# Every target installs what it needs (virtualenv, Python packages, Debian packages).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
STACK_DIR ?= .stack
# `make up STACK=embedded` forces the local-process stack even where Docker answers.
STACK  ?= $(shell docker info >/dev/null 2>&1 && echo docker || echo embedded)
COMPOSE := docker compose -f compose/docker-compose.yml

.PHONY: up down status test test-faults test-busy bench lint deps system-deps jars

deps: system-deps $(STAMP) jars

# The jars pinned in compose/jars/pom.xml, from Maven Central (once; compose/jars.py): Apache
# Kafka's, and the warehouse's Spark ones (Kafka source, spark-avro, delta-spark).
jars: $(STAMP)
	@$(BIN)/python -m compose.jars kafka >/dev/null
	@$(BIN)/python -m compose.jars spark >/dev/null

system-deps:
	@sh compose/system-deps.sh

# '.[dev]' is everything: the core, every extra (search, warehouse, stack) and the tests' tools.
# The project was the distribution `bottler` before `bottler-cdc`: an old venv's copy goes first.
$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "installing Python packages into $(VENV) (first run takes a few minutes)"
	@{ $(BIN)/python -m pip install --disable-pip-version-check -U pip \
	   && $(BIN)/python -m pip uninstall --disable-pip-version-check -y bottler \
	   && $(BIN)/python -m pip install --disable-pip-version-check -e '.[dev]'; } \
		> $(VENV)/pip.log 2>&1 \
		|| { tail -20 $(VENV)/pip.log; echo "pip failed: full log in $(VENV)/pip.log"; exit 1; }
	@touch $(STAMP)

ifeq ($(STACK),docker)
up: deps
	$(COMPOSE) up -d --build
down:
	$(COMPOSE) down
else
up: deps
	@$(BIN)/bottler stack up --dir $(STACK_DIR) --demo --all
down: $(STAMP)
	@$(BIN)/bottler stack down --dir $(STACK_DIR)
endif

status: $(STAMP)
	@$(BIN)/bottler stack status --dir $(STACK_DIR)

test: deps
	$(BIN)/pytest

# The fault suite alone, longer and harder than in `make test` (tests/faults/test_faults.py).
test-faults: deps
	BOTTLER_FAULT_SECONDS=$${BOTTLER_FAULT_SECONDS:-120} BOTTLER_FAULT_RATE=$${BOTTLER_FAULT_RATE:-50} \
		BOTTLER_FAULT_BROKER_KILLS=$${BOTTLER_FAULT_BROKER_KILLS:-5} \
		$(BIN)/pytest -m faults tests/faults

# The appliance test and the fault suite with every core kept busy by a busy loop beside them
# (tests/conftest.py, cpu_hog): the views must keep up on a machine with no idle CPU.
test-busy: deps
	BOTTLER_CPU_HOG=1 $(BIN)/pytest tests/test_appliance.py tests/faults

bench: deps
	$(BIN)/python -m tests.bench

lint: $(STAMP)
	$(BIN)/ruff check .
