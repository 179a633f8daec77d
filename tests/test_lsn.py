"""common/lsn.py: the LSN type, its text form as PostgreSQL writes and reads it."""

import json

import pytest

from common.lsn import Lsn


@pytest.mark.parametrize(
    ("lsn", "text_form"),
    [
        (0, "0/0"),
        (0x16_B374D848, "16/B374D848"),
        (0x1_00000000, "1/0"),
        (0xFFFF_FFFF, "0/FFFFFFFF"),
        ((1 << 64) - 1, "FFFFFFFF/FFFFFFFF"),
    ],
)
def test_lsn_round_trip(lsn, text_form):
    assert str(Lsn(lsn)) == text_form
    assert f"{Lsn(lsn)}" == text_form
    assert Lsn.parse(text_form) == lsn
    assert Lsn.parse(text_form.lower()) == lsn


@pytest.mark.parametrize("bad", ["", "16", "/1", "1/", "G/0", "1/2/3", "123456789/0", " 1/0"])
def test_parse_refuses_what_is_not_an_lsn(bad):
    with pytest.raises(ValueError, match="not an LSN"):
        Lsn.parse(bad)


@pytest.mark.parametrize("bad", [-1, 1 << 64])
def test_refuses_out_of_range(bad):
    with pytest.raises(ValueError, match="out of range"):
        Lsn(bad)


def test_an_lsn_is_its_number():
    lsn = Lsn.parse("1/10")
    assert lsn == 0x1_00000010 and int(lsn) == 0x1_00000010
    assert Lsn.parse("0/FF") < lsn < Lsn.parse("2/0")
    assert json.dumps({"lsn": lsn}) == '{"lsn": 4294967312}'
    assert b"%d" % lsn == b"4294967312"
    assert repr(lsn) == "Lsn('1/10')"
