"""`jobtracking.infra.storable`: the one rule for what PostgreSQL and our JSON writers can hold,
each part of it, the paths it names, and the safe copies made of what breaks it."""

import math

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobtracking.infra.storable import (
    MAX_DEPTH,
    REPLACEMENT,
    TooDeepError,
    json_problem,
    safe_json,
    safe_text,
    text_problem,
)

INT_MAX = 2**63 - 1
INT_MIN = -(2**63)


def nested(levels: int, inner=None):
    value = inner
    for _ in range(levels):
        value = [value]
    return value


# Text


@pytest.mark.parametrize("text", ["", "budget.pdf", "résumé ✓ 😀", REPLACEMENT, "\x01\t\n"])
def test_text_problem_accepts_unicode_text(text):
    assert text_problem(text) is None
    assert safe_text(text) is text


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("a\x00b", "Null characters are not allowed."),
        ("a\ud800b", "Must be valid Unicode text (no lone surrogates)."),
        ("\udfff", "Must be valid Unicode text (no lone surrogates)."),
        # A pair in a Python string is still two code points that UTF-8 cannot write.
        ("\ud83d\ude00", "Must be valid Unicode text (no lone surrogates)."),
    ],
)
def test_text_problem_refuses_nul_and_surrogates(text, why):
    assert text_problem(text) == why


def test_safe_text_replaces_each_unstorable_character():
    assert safe_text("a\x00b\ud800c\udfffé") == f"a{REPLACEMENT}b{REPLACEMENT}c{REPLACEMENT}é"
    assert text_problem(safe_text("\x00\ud800")) is None


# JSON: numbers


@pytest.mark.parametrize(
    "number", [0, -1, INT_MAX, INT_MIN, 1.5, -2.5e-300, 1e18, -9.2e18, True, False]
)
def test_json_problem_accepts_numbers_within_64_bits(number):
    assert json_problem({"n": number}) is None


@pytest.mark.parametrize(
    ("number", "why"),
    [
        (INT_MAX + 1, "Integers must fit in 64 bits."),
        (INT_MIN - 1, "Integers must fit in 64 bits."),
        (2**64, "Integers must fit in 64 bits."),
        # PostgreSQL writes 1e308 back as an integer of 309 digits, which orjson cannot read.
        (1e308, "Numbers must be within the 64-bit integer range."),
        (-1e19, "Numbers must be within the 64-bit integer range."),
        (math.nan, "Numbers must be finite (NaN and Infinity are not JSON)."),
        (math.inf, "Numbers must be finite (NaN and Infinity are not JSON)."),
        (-math.inf, "Numbers must be finite (NaN and Infinity are not JSON)."),
    ],
)
def test_json_problem_refuses_numbers_beyond_64_bits_or_not_finite(number, why):
    assert json_problem({"n": number}) == ("n", why)


# JSON: text, keys, types, depth, paths


def test_json_problem_names_the_path_of_the_value():
    assert json_problem({"a": {"b": [1, 2, "\x00"]}}) == (
        "a.b[2]",
        "Null characters are not allowed.",
    )
    assert json_problem([{"x": 2**64}]) == ("[0].x", "Integers must fit in 64 bits.")
    assert json_problem("\ud800") == ("", "Must be valid Unicode text (no lone surrogates).")


def test_json_problem_finds_the_first_problem_in_the_order_written():
    assert json_problem({"a": [math.nan, 2**64], "b": "\x00"})[0] == "a[0]"


@pytest.mark.parametrize(
    ("key", "why"),
    [
        ("k\x00", "Null characters are not allowed."),
        ("k\ud800", "Must be valid Unicode text (no lone surrogates)."),
        (7, "keys must be text."),
    ],
)
def test_json_problem_refuses_keys_naming_the_object_they_are_in(key, why):
    path, message = json_problem({"outer": {key: 1}})
    assert path == "outer" and message.endswith(why)
    assert "\ud800" not in message and "\x00" not in message  # the key is shown safely


@pytest.mark.parametrize("value", [(1, 2), {1, 2}, b"bytes", object()])
def test_json_problem_refuses_what_is_not_json(value):
    path, why = json_problem({"v": value})
    assert path == "v" and why.startswith("Not a JSON value")


def test_json_problem_allows_max_depth_levels_and_no_more():
    assert json_problem(nested(MAX_DEPTH, "leaf")) is None
    path, why = json_problem(nested(MAX_DEPTH + 1))
    assert path == "[0]" * MAX_DEPTH and why == f"Must nest at most {MAX_DEPTH} levels deep."
    assert json_problem({"a": nested(MAX_DEPTH)})[0] == "a" + "[0]" * (MAX_DEPTH - 1)


def test_json_problem_reads_hostile_nesting_without_recursion():
    assert json_problem(nested(100_000))[1].startswith("Must nest at most")


# Any character, surrogates and NUL often; integers and floats of every size, NaN and Infinity.
TEXT = st.text(st.characters(exclude_categories=()) | st.sampled_from("\x00\ud800\udfff"))
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | TEXT,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(TEXT, children, max_size=3),
    max_leaves=10,
)


@given(JSON)
def test_what_json_problem_accepts_orjson_writes_and_reads_back(value):
    if json_problem(value) is None:
        assert orjson.loads(orjson.dumps(value)) == value


# Safe copies


@given(JSON)
def test_safe_json_makes_a_storable_copy_and_changes_nothing_storable(value):
    copy, changes = safe_json(value)
    assert json_problem(copy) is None
    if json_problem(value) is None:
        assert copy == value and changes == []
    else:
        assert changes


def test_safe_json_says_where_it_changed_what():
    value = {"t": "a\x00", "n": [2**64, math.nan], "k\ud800": 1.5e300, "o": {1, 2}}
    copy, changes = safe_json(value)
    assert copy == {
        "t": f"a{REPLACEMENT}",
        "n": [str(2**64), None],
        f"k{REPLACEMENT}": repr(1.5e300),
        "o": None,
    }
    assert changes == [
        "t: unstorable characters replaced by U+FFFD",
        "n[0]: number beyond 64 bits kept as text",
        "n[1]: nan replaced by null",
        f"k{REPLACEMENT}: key's unstorable characters replaced",
        f"k{REPLACEMENT}: number beyond 64 bits kept as text",
        "o: set replaced by null",
    ]
    assert value["t"] == "a\x00"  # the original is left as it was


def test_safe_json_refuses_to_copy_past_max_depth():
    assert safe_json(nested(MAX_DEPTH, 1)) == (nested(MAX_DEPTH, 1), [])
    with pytest.raises(TooDeepError):
        safe_json(nested(MAX_DEPTH + 1))
