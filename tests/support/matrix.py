"""The PostgreSQL majors the version matrix runs (docs/capture.md): a test module marked
`pg_matrix` runs each of its tests once per major (tests/conftest.py), on the session's stack
(PostgreSQL of $BOTTLER_TEST_PG_VERSION, default the first found) and on a server of its own for
each other (tests/support/stack.py). `make test` runs 15 and 18; $BOTTLER_TEST_PG_MATRIX names
others (`make test-pg-matrix`: 15 to 18, 16 and 17 from PyPI's wheels, too long for every
run)."""

from __future__ import annotations

import os

PG_MATRIX = tuple(os.environ.get("BOTTLER_TEST_PG_MATRIX", "15 18").split())
