"""What PostgreSQL and our JSON writers can hold, as one rule for every value from outside: a
client's input, an extractor's answer or result, a receiver's answer.

- Text: no NUL character (PostgreSQL's text and jsonb refuse it) and no lone surrogate (not
  Unicode: it cannot be written as UTF-8).
- JSON: such text nowhere (keys included); numbers finite (`NaN` and `Infinity` are not JSON);
  integers, and numbers PostgreSQL would write back as integers, within 64 bits (orjson writes
  no wider); at most `MAX_DEPTH` levels of lists and objects (Python's parser and writer
  recurse).

A client's value that breaks the rule is refused (`json_problem`, `text_problem`: the API says
which field and why). An extractor's or receiver's value is made safe (`safe_text`, `safe_json`):
every such character becomes U+FFFD, a non-finite number `null`, a number beyond 64 bits its
decimal text; `safe_json` lists where it changed something, and the original bytes are kept.
"""

import math
import re
from typing import Any

MAX_DEPTH = 64
INT_MIN, INT_MAX = -(2**63), 2**63 - 1
REPLACEMENT = "\ufffd"

# A NUL, or a surrogate: in a Python string, even a pair of them is two code points that UTF-8
# cannot write (JSON's escaped pairs are decoded as one character).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


class TooDeepError(ValueError):
    """Lists and objects nested deeper than `MAX_DEPTH`: no safe copy can be made."""


def text_problem(text: str) -> str | None:
    """Why `text` cannot be stored, or None."""
    if "\x00" in text:
        return "Null characters are not allowed."
    if _UNSTORABLE.search(text):
        return "Must be valid Unicode text (no lone surrogates)."
    return None


def safe_text(text: str) -> str:
    """`text` with every NUL and lone surrogate replaced by U+FFFD."""
    if text.isascii() and "\x00" not in text:
        return text
    return _UNSTORABLE.sub(REPLACEMENT, text)


def _number_problem(value: int | float) -> str | None:
    if isinstance(value, float):
        if not math.isfinite(value):
            return "Numbers must be finite (NaN and Infinity are not JSON)."
        if not INT_MIN <= value <= INT_MAX:
            return "Numbers must be within the 64-bit integer range."
        return None
    if not INT_MIN <= value <= INT_MAX:
        return "Integers must fit in 64 bits."
    return None


def json_problem(value: Any) -> tuple[str, str] | None:
    """The first place in a JSON value that cannot be stored, as (path, why), or None. The path
    is `""` for the value itself, else like `a.b[2]`."""
    stack = [(value, "", 1)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, str):
            problem = text_problem(item)
        elif isinstance(item, bool) or item is None:
            problem = None
        elif isinstance(item, int | float):
            problem = _number_problem(item)
        elif isinstance(item, dict | list):
            if depth > MAX_DEPTH:
                return path, f"Must nest at most {MAX_DEPTH} levels deep."
            problem = None
            children = []
            if isinstance(item, dict):
                for key, child in item.items():
                    if not isinstance(key, str) or (why := text_problem(key)):
                        return path, f"Key {_shown(key)}: {why or 'keys must be text.'}"
                    children.append((child, _join(path, key), depth + 1))
            else:
                children = [(child, f"{path}[{i}]", depth + 1) for i, child in enumerate(item)]
            stack.extend(reversed(children))  # (so that they are checked in their order)
        else:
            problem = f"Not a JSON value ({type(item).__name__})."
        if problem:
            return path, problem
    return None


def safe_json(value: Any) -> tuple[Any, list[str]]:
    """A copy of `value` that can be stored, and the paths where it differs (`path: what`).
    Raises `TooDeepError` for nesting past `MAX_DEPTH`."""
    changes: list[str] = []
    return _safe(value, "", 1, changes), changes


def _safe(item: Any, path: str, depth: int, changes: list[str]) -> Any:
    if isinstance(item, str):
        return _safe_string(item, path, changes)
    if isinstance(item, bool) or item is None:
        return item
    if isinstance(item, int | float):
        return _safe_number(item, path, changes)
    if depth > MAX_DEPTH:
        raise TooDeepError(f"nested deeper than {MAX_DEPTH} levels at {path or '$'}")
    if isinstance(item, list):
        return [_safe(child, f"{path}[{i}]", depth + 1, changes) for i, child in enumerate(item)]
    if isinstance(item, dict):
        return _safe_object(item, path, depth, changes)
    changes.append(f"{path or '$'}: {type(item).__name__} replaced by null")
    return None


def _safe_string(item: str, path: str, changes: list[str]) -> str:
    safe = safe_text(item)
    if safe is not item and safe != item:
        changes.append(f"{path or '$'}: unstorable characters replaced by U+FFFD")
    return safe


def _safe_number(item: int | float, path: str, changes: list[str]) -> int | float | str | None:
    if _number_problem(item) is None:
        return item
    if isinstance(item, float) and not math.isfinite(item):
        changes.append(f"{path or '$'}: {item} replaced by null")
        return None
    changes.append(f"{path or '$'}: number beyond 64 bits kept as text")
    return str(item) if isinstance(item, int) else repr(item)


def _safe_object(item: dict, path: str, depth: int, changes: list[str]) -> dict:
    copy = {}
    for key, child in item.items():
        safe_key = safe_text(str(key))
        if safe_key != key:
            changes.append(f"{_join(path, safe_key)}: key's unstorable characters replaced")
        copy[safe_key] = _safe(child, _join(path, safe_key), depth + 1, changes)
    return copy


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _shown(key: Any) -> str:
    return repr(safe_text(str(key)))[:60]
