"""Quantity and semver parsing and comparison, table-driven."""

from decimal import Decimal

import pytest

from fleet.quantity import INT64_MAX, Quantity, QuantityError, is_quantity, parse_quantity
from fleet.semver import SemverError, is_semver, parse_semver

QUANTITIES = [
    ("1", Decimal(1)), ("0", Decimal(0)), ("-3", Decimal(-3)), ("+3", Decimal(3)),
    ("1Ki", Decimal(1024)), ("20Gi", Decimal(20 * 2**30)), ("1.5Gi", Decimal(int(1.5 * 2**30))),
    ("23034Mi", Decimal(23034 * 2**20)), ("500m", Decimal("0.5")), ("1k", Decimal(1000)),
    ("1M", Decimal(10**6)), ("2G", Decimal(2 * 10**9)), ("1T", Decimal(10**12)), ("1P", Decimal(10**15)),
    ("1E", Decimal(10**18)), ("3n", Decimal("3e-9")), ("3u", Decimal("3e-6")), ("1e3", Decimal(1000)),
    ("1E3", Decimal(1000)), ("1e-3", Decimal("0.001")), ("1.5e+2", Decimal(150)), (".5", Decimal("0.5")),
    ("5.", Decimal(5)), ("0.1n", Decimal("1e-9")),  # rounded up to nano
    ("-0.1n", Decimal("-1e-9")),  # away from zero
    ("1.0000000001", Decimal("1.000000001")),
    ("8Ei", Decimal(INT64_MAX)), ("10Ei", Decimal(INT64_MAX)), ("100Ei", Decimal(INT64_MAX)),
    ("-10Ei", Decimal(-INT64_MAX)), ("7Ei", Decimal(7 * 2**60)),
    ("256E", Decimal("2.56e20")),  # the decimal path does not saturate
]
BAD_QUANTITIES = ["", " 1", "1 ", "1K", "1,000", "Gi", "k", "1Gb", "1GB", "1.2.3", "--1", "1e", "e3", "0x10", "1 Gi", "Mi1"]


@pytest.mark.parametrize("text,value", QUANTITIES)
def test_quantity_parses(text, value):
    assert parse_quantity(text) == value
    assert is_quantity(text)


@pytest.mark.parametrize("text", BAD_QUANTITIES)
def test_quantity_rejects(text):
    with pytest.raises(QuantityError):
        parse_quantity(text)
    assert not is_quantity(text)


@pytest.mark.parametrize("a,b,expected", [
    ("1Gi", "1024Mi", 0), ("1G", "1Gi", -1), ("81559Mi", "80Gi", -1), ("81559Mi", "75Gi", 1),
    ("1", "1000m", 0), ("8Ei", "100Ei", 0), ("-1", "1", -1),
])
def test_quantity_compare(a, b, expected):
    assert Quantity(a).compare_to(Quantity(b)) == expected
    assert (Quantity(a) == Quantity(b)) == (expected == 0)


def test_quantity_arithmetic_and_integers():
    assert Quantity("1Gi").add(5) == Quantity(str(2**30 + 5))
    assert Quantity("1Gi").sub(Quantity("1Mi")) == Quantity("1023Mi")
    assert Quantity("1500m").is_integer() is False
    assert Quantity("2k").as_integer() == 2000
    with pytest.raises(QuantityError):
        Quantity("1500m").as_integer()
    assert Quantity("256E").is_integer() is False  # outside int64
    assert Quantity("-5").sign() == -1 and Quantity("0").sign() == 0 and Quantity("1m").sign() == 1
    assert Quantity("1500m").as_approximate_float() == 1.5
    with pytest.raises(QuantityError):
        Quantity("1").add(1.5)


SEMVERS = [
    ("1.2.3", False, (1, 2, 3, ())),
    ("0.0.0", False, (0, 0, 0, ())),
    ("1.2.3-rc.1", False, (1, 2, 3, ("rc", 1))),
    ("1.2.3-alpha-beta.0", False, (1, 2, 3, ("alpha-beta", 0))),
    ("1.2.3+build.5", False, (1, 2, 3, ())),
    ("1.2.3-rc.1+build-7", False, (1, 2, 3, ("rc", 1))),
    ("1.2.3+build-7-x", False, (1, 2, 3, ())),  # build split first, so its '-' is not a prerelease
    ("v1.2.3", True, (1, 2, 3, ())),
    ("v1.2", True, (1, 2, 0, ())),
    ("1", True, (1, 0, 0, ())),
    ("01.002.0003", True, (1, 2, 3, ())),
    ("v550.54.15", True, (550, 54, 15, ())),
]
BAD_SEMVERS = [
    ("v1.2.3", False), ("1.2", False), ("01.2.3", False), ("1.2.3-01", False), ("1.2.3-", False),
    ("1.2.3-a..b", False), ("1.2.3+", False), ("1.2.3+a_b", False), ("1.2.3.4", False), ("a.b.c", False),
    (" 1.2.3", True), ("1.2-rc", True), ("1+b", True), ("", False), ("-1.2.3", False),
]


@pytest.mark.parametrize("text,normalize,parts", SEMVERS)
def test_semver_parses(text, normalize, parts):
    v = parse_semver(text, normalize)
    assert (v.major, v.minor, v.patch, v.prerelease) == parts
    assert is_semver(text, normalize)


@pytest.mark.parametrize("text,normalize", BAD_SEMVERS)
def test_semver_rejects(text, normalize):
    with pytest.raises(SemverError):
        parse_semver(text, normalize)
    assert not is_semver(text, normalize)


@pytest.mark.parametrize("a,b,expected", [
    ("1.2.3", "1.2.3", 0), ("1.2.3", "1.2.4", -1), ("2.0.0", "1.99.99", 1), ("1.10.0", "1.9.0", 1),
    ("1.0.0-rc.1", "1.0.0", -1), ("1.0.0-alpha", "1.0.0-alpha.1", -1), ("1.0.0-alpha.1", "1.0.0-alpha.beta", -1),
    ("1.0.0-beta.2", "1.0.0-beta.11", -1), ("1.0.0-beta", "1.0.0-alpha", 1), ("1.0.0-1", "1.0.0-a", -1),
    ("1.0.0+a", "1.0.0+b", 0), ("1.0.0-Z", "1.0.0-a", -1),  # byte order: 'Z' < 'a'
])
def test_semver_ordering(a, b, expected):
    assert parse_semver(a).compare_to(parse_semver(b)) == expected
    assert parse_semver(b).compare_to(parse_semver(a)) == -expected
    assert (parse_semver(a) == parse_semver(b)) == (expected == 0)
