"""What the capture asks of each PostgreSQL version (capture/source/versions.py), from the
server's version number alone: the oldest supported, generated columns (18 on), decoding on a
standby (16 on)."""

from __future__ import annotations

import pytest

from capture.source.versions import check_standby_decoding, publishes_generated, unsupported
from common.errors import BottlerError


@pytest.mark.parametrize("asked, version, publishes", [
    ("auto", 150004, False), ("auto", 180006, True), ("off", 180006, False),
    ("on", 180000, True), ("off", 150004, False)])
def test_generated_columns_follow_the_flag_and_the_servers_version(asked, version, publishes):
    assert publishes_generated(asked, version) is publishes


def test_generated_columns_asked_of_an_older_server_name_18():
    with pytest.raises(BottlerError, match="needs PostgreSQL 18 \\(the source runs 17\\)"):
        publishes_generated("on", 170002)


@pytest.mark.parametrize("version", [90624, 130012, 140011])
def test_a_server_older_than_15_is_refused_naming_the_oldest_supported(version):
    error = unsupported(version)
    assert error is not None
    assert str(error).splitlines()[0] == (
        f"the source runs PostgreSQL {version // 10000}; bottler supports PostgreSQL 15 "
        "and later")


@pytest.mark.parametrize("version", [150000, 160004, 180006])
def test_15_and_later_are_supported(version):
    assert unsupported(version) is None


def test_decoding_on_a_standby_needs_16():
    with pytest.raises(BottlerError, match="standby of PostgreSQL 15; logical decoding on a "
                       "standby needs PostgreSQL 16 or later"):
        check_standby_decoding(150013)
    check_standby_decoding(160000)
