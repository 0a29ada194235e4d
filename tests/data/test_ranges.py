"""Batch ranges as written on the command line, and choosing a provider by name."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from convnet.data import PROVIDERS, format_range, make_provider, parse_range
from convnet.errors import DataError


@pytest.mark.parametrize("text, batches", [
    ("1-5", [1, 2, 3, 4, 5]), ("6", [6]), ("1-3,6", [1, 2, 3, 6]), (" 0 - 2 , 9 ", [0, 1, 2, 9]),
    ("7,3", [7, 3]), ("1000-1002", [1000, 1001, 1002]),
])
def test_parse(text, batches):
    assert parse_range(text) == batches


@pytest.mark.parametrize("text, message", [
    ("", "empty"), ("  ", "empty"), ("a", "cannot read 'a'"), ("1-", "cannot read '1-'"),
    ("-3", "cannot read '-3'"), ("1,,2", "cannot read ''"), ("5-1", "5-1 runs backwards"),
    ("1-3,2", "names batch 2 twice"), ("1.5", "cannot read"), ("1-2-3", "cannot read"),
])
def test_parse_rejects_junk(text, message):
    with pytest.raises(DataError, match=message):
        parse_range(text)


def test_format():
    assert format_range([1, 2, 3, 6]) == "1-3,6"
    assert format_range([6]) == "6" and format_range([]) == ""
    assert format_range([3, 4, 1]) == "3-4,1"


@given(st.lists(st.integers(0, 50), unique=True, min_size=1))
def test_format_then_parse_round_trips(batches):
    assert parse_range(format_range(batches)) == batches


def test_registry():
    assert set(PROVIDERS) == {"digits", "cifar", "convnet-batches", "dummy", "image"}
    with pytest.raises(DataError, match="unknown data provider 'cifr' \\(did you mean 'cifar'\\?\\)"):
        make_provider("cifr", "/tmp")
