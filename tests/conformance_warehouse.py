"""The conformance adapter for the warehouse materializer (see tests/test_conformance.py)."""

from __future__ import annotations

import pytest


def adapter(request, cleanup):
    pytest.skip("the warehouse materializer is not built yet")
