"""JSON text from outside, parsed with bounds: the one parser of the API's request bodies
and of the console's JSON editor.

Python's parser recurses once per nesting level and the code that reads its result
(validation, serialisation, the recurrence compiler) recurses again, so a document nested
a thousand levels deep can exhaust the interpreter's stack wherever it travels: a
``RecursionError`` is an unhandled fault, not a refusal. :func:`loads` refuses any
document nested deeper than :data:`MAX_DEPTH` before parsing it; nothing the product takes
comes near it (a saved query's filter value is four levels deep). This module imports
nothing of Timekeeper, so every layer may use it.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import Any

#: The deepest nesting of arrays and objects a document may have (the top level is 1).
MAX_DEPTH = 64
#: The reason of a document nested deeper than :data:`MAX_DEPTH` (or than the parser's own recursion).
TOO_DEEP = "nested too deeply"
#: The reason of an integer literal longer than Python converts (over 4,300 digits).
NUMBER_TOO_LONG = "a number is too long"
#: The reasons worth showing a person or client (the parser's own are positions in the text).
REASONS = frozenset({TOO_DEEP, NUMBER_TOO_LONG})

_STRING = re.compile(r'"(?:[^"\\]++|\\.)*+"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]++")


def depth(text: str) -> int:
    """How deeply ``text``'s arrays and objects nest (0: a scalar; brackets inside strings
    do not count). Linear in the text's length; for text that is no JSON, an upper bound
    of what a parser would reach before refusing it."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(0, max(accumulate(1 if c in "[{" else -1 for c in brackets), default=0))


def loads(text: str | bytes, *, max_depth: int = MAX_DEPTH) -> Any:
    """Parse ``text`` (JSON) into Python values, as ``json.loads`` does.

    Raises ``json.JSONDecodeError`` for anything refused, so that a caller handles one
    exception: invalid JSON (the parser's own message), a document nested deeper than
    ``max_depth`` levels (message :data:`TOO_DEEP`; also when the parser runs out of
    stack first), and an integer literal longer than Python converts
    (:data:`NUMBER_TOO_LONG`)."""
    if isinstance(text, bytes | bytearray):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise json.JSONDecodeError("not UTF-8", "", 0) from None
    if text.count("[") + text.count("{") > max_depth and depth(text) > max_depth:
        raise json.JSONDecodeError(TOO_DEEP, text, 0)
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise json.JSONDecodeError(TOO_DEEP, text, 0) from None
    except ValueError:
        raise json.JSONDecodeError(NUMBER_TOO_LONG, text, 0) from None
