import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from searchenv.utils.jsonsafe import JSONInputError, iter_jsonl, loads

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4),
    max_leaves=20,
)


@given(json_values)
def test_round_trips_ordinary_values(value):
    assert loads(json.dumps(value), "x") == value
    assert loads(json.dumps(value).encode(), "x") == value


@given(st.binary(max_size=64))
def test_any_bytes_parse_or_raise_the_one_error(data):
    try:
        loads(data, "body")
    except JSONInputError as exc:
        assert str(exc).startswith("body: ")


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ("1" * 5000, "unusable JSON value"),
        (b'{"a": "\xff"}', "not valid UTF-8"),
        ('{"a": }', "invalid JSON at column 7"),
    ],
)
def test_hostile_inputs_name_place_and_reason(data, reason):
    with pytest.raises(JSONInputError, match=f"^req: .*{reason}"):
        loads(data, "req")


def test_max_depth_is_checked_without_recursion():
    assert loads("[[[1]]]", "x", max_depth=3) == [[[1]]]
    with pytest.raises(JSONInputError, match="deeper than 2"):
        loads("[[[1]]]", "x", max_depth=2)
    with pytest.raises(JSONInputError, match="deeper than 2"):
        loads('{"a": {"b": {"c": 1}}}', "x", max_depth=2)


class _MyError(ValueError):
    pass


def test_iter_jsonl_names_file_and_line(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_bytes(b'{"id": 1}\n\n{"id": "\xff"}\n')
    rows = iter_jsonl(path, error=_MyError)
    assert next(rows) == (f"{path}:1", {"id": 1})
    with pytest.raises(_MyError, match=rf"^{path}:3: not valid UTF-8"):
        next(rows)
    path.write_text('{"id": 1}\n' + "[" * 70 + "]" * 70 + "\n")
    with pytest.raises(_MyError, match=rf"^{path}:2: JSON nested deeper than 64"):
        list(iter_jsonl(path, error=_MyError))
