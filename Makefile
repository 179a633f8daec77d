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

.PHONY: up down status test test-faults test-busy test-opensearch3 test-apicurio test-jars \
	test-pg-matrix bench \
	bench-migration bench-peers lint deps system-deps jars

deps: system-deps $(STAMP) jars

# The jars pinned in compose/jars/pom.xml, from Maven Central (once; compose/jars.py, which also
# compiles the search engine's launcher): Apache Kafka's, OpenSearch's, and the warehouse's
# Spark ones (Kafka source, spark-avro, delta-spark); then the spark route's class-data archive
# of those (once, about a minute and a half; materializers/warehouse/cds.py).
jars: $(STAMP)
	@$(BIN)/python -m compose.jars kafka opensearch spark >/dev/null
	@$(BIN)/python -m materializers.warehouse.cds >/dev/null

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

# Three workers, each with a stack of its own, each given whole modules (pytest-xdist): most of a
# service test is waiting on processes, so even on 2 cores several at once finish sooner
# (docs/quickstart.md); in the order tests/conftest.py gives them, slowest first.
# TEST_WORKERS=0 runs the suite in this process alone. The tests also fetch Apicurio Registry's
# jars (tests/test_apicurio.py), which `make up` does not need.
TEST_WORKERS ?= 3
test: deps test-jars
	$(BIN)/pytest $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile \
		--no-loadscope-reorder)

test-jars: $(STAMP)
	@$(BIN)/python -m compose.jars apicurio apicurio-serde >/dev/null

# The version matrix's suites (the capture's, the replica's, the migration's and the cutover's:
# tests marked pg_matrix) on every major there is a package of: 15 (Debian's), 16, 17 and 18
# (PyPI's wheels, in the dev extra), and the failover slots' (pg18) on 17 and 18. `make test`
# runs them on 15 and 18 only, within its 20 minutes. PG_MATRIX="15 17" runs those named.
PG_MATRIX ?= 15 16 17 18
test-pg-matrix: deps
	BOTTLER_TEST_PG_MATRIX="$(PG_MATRIX)" $(BIN)/pytest -m "pg_matrix or pg18" \
		$(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder)

# The fault suite alone, longer and harder than in `make test` (tests/faults/test_faults.py).
test-faults: deps
	BOTTLER_FAULT_SECONDS=$${BOTTLER_FAULT_SECONDS:-120} BOTTLER_FAULT_RATE=$${BOTTLER_FAULT_RATE:-50} \
		BOTTLER_FAULT_BROKER_KILLS=$${BOTTLER_FAULT_BROKER_KILLS:-5} \
		$(BIN)/pytest -m faults tests/faults

# The appliance test and the fault suite with every core kept busy by a busy loop beside them
# (tests/conftest.py, cpu_hog): the views must keep up on a machine with no idle CPU.
test-busy: deps
	BOTTLER_CPU_HOG=1 $(BIN)/pytest tests/test_appliance.py tests/faults

# The search tests against OpenSearch 3 instead of the stack's OpenSearch 2 (the same client
# claims both), alone: `make test` runs them too. OpenSearch 3 runs on Java 21 or newer
# (JAVA25_HOME).
JAVA25_HOME ?= /usr/lib/jvm/temurin-25-jdk-amd64
test-opensearch3: deps
	JAVA25_HOME=$(JAVA25_HOME) $(BIN)/pytest tests/test_second_engine.py

# The stack with Apicurio Registry 3 for its registry (tests/test_apicurio.py: every view equal
# to the source, a JVM consumer with Apicurio's deserializer), alone: `make test` runs it too.
# Apicurio needs Java 21+: JAVA_HOME, or a JDK in /usr/lib/jvm.
test-apicurio: deps test-jars
	$(BIN)/pytest tests/test_apicurio.py

bench: deps
	$(BIN)/python -m tests.bench

# The seeded initial copy against pg_dump | psql at 1M and 10M rows (~1 GB; about 6 GB of disk
# at the peak), alone: tests/bench/migration.py seeded_sizes.
bench-migration: deps
	$(BIN)/python -m tests.bench --migration-only --migration-sizes 1000000,10000000

# bottler against Debezium in Kafka Connect (tests/bench/peers.py); its jars are fetched first.
bench-peers: deps
	@for p in connect debezium-postgres debezium-jdbc apicurio apicurio-converter; do $(BIN)/python -m compose.jars $$p >/dev/null || exit 1; done
	$(BIN)/python -m tests.bench.peers

lint: $(STAMP)
	$(BIN)/ruff check .
