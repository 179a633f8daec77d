"""The conformance suite's adapter for the search materializer (see tests/test_conformance.py)."""

from __future__ import annotations

import pytest


def adapter(request, cleanup):
    pytest.skip("the search materializer is not built yet")
