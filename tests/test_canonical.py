"""R23: the fast canonical writer gives exactly RFC 8785's bytes (``rfc8785.dumps``)."""

from __future__ import annotations

import copy
import math
from typing import Any

import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.contract.canonical import canonical_float, canonical_json

SAFE_INTEGER = 2**53 - 1

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-SAFE_INTEGER, SAFE_INTEGER)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
    | st.sampled_from(["\x00", "\u2028", "\x7f", '"\\', "\U0001f600", "\x000\x00"])
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=5)
        | st.dictionaries(
            st.text(max_size=4) | st.sampled_from(["\ue000", "\U00010000"]), children, max_size=5
        )
    ),
    max_leaves=30,
)


@settings(max_examples=500)
@given(json_values)
def test_r23_matches_rfc8785_and_leaves_input_alone(value: Any) -> None:
    before = copy.deepcopy(value)
    try:
        expected = rfc8785.dumps(value) + b"\n"
    except (rfc8785.CanonicalizationError, UnicodeEncodeError):
        return  # e.g. a lone surrogate: not representable, nothing to compare
    assert canonical_json(value) == expected
    assert value == before


def test_r23_key_order_is_by_utf16_code_units() -> None:
    # Python sorts "\ue000" after "\U00010000" by code point; RFC 8785 sorts by UTF-16 units,
    # where the surrogate pair of U+10000 (0xD800...) comes first.
    value = {"\ue000": 1, "\U00010000": 2}
    assert canonical_json(value) == rfc8785.dumps(value) + b"\n"
    assert canonical_json(value).index("\U00010000".encode()) < canonical_json(value).index(
        "\ue000".encode()
    )


#: Floats at the edges of ``canonical_float``'s fast path (``repr``) and of ECMAScript's notations.
EDGE_FLOATS = [
    1e-4,
    math.nextafter(1e-4, 0.0),
    math.nextafter(1e-4, 1.0),
    1e-6,
    1e-7,
    0.1,
    1 / 3,
    2 / 3 * 1e15,
    2**52 + 0.5,  # rounds to 2**52: integral
    4503599627370495.5,
    1e16,
    math.nextafter(1e16, 0.0),
    9999999999999998.0,
    1e21,
    123e18,
    5e-324,
    1.7976931348623157e308,
    0.0,
    -0.0,
    17074.015748031496,
]


@settings(max_examples=2000)
@given(
    st.floats(allow_nan=False, allow_infinity=False)
    | st.floats(min_value=1e-5, max_value=1e17)
    | st.sampled_from(EDGE_FLOATS)
)
def test_r23_a_float_is_written_as_rfc8785_writes_it(value: float) -> None:
    for number in (value, -value):
        assert canonical_float(number) == rfc8785.dumps(number)
        assert canonical_json([number]) == rfc8785.dumps([number]) + b"\n"
