"""The API's text patterns mean the same to every reader of the document.

The server validates with pydantic (Rust's regex, where ``\\s`` is Unicode White_Space);
clients and fuzzers read the OpenAPI document's patterns in JSON Schema's ECMA dialect; the
``_not_blank`` check uses Python's ``str.isspace``. A character one of them calls white space
and another does not would make a schema-valid request a 422 (U+0085 and U+FEFF did).
"""

import json
import re
from pathlib import Path

import pytest
from pydantic import BaseModel, Field, ValidationError

from timekeeper.api.models import NOT_BLANK_PATTERN, TOKEN_PATTERN

#: ECMAScript's WhiteSpace and LineTerminator code points (ECMA-262, 12.2 and 12.3): what
#: ``\s`` matches in a JSON Schema pattern.
ECMA_SPACE = ["\t", "\n", "\v", "\f", "\r", " ", "\xa0", "\u1680", *map(chr, range(0x2000, 0x200B)),
              "\u2028", "\u2029", "\u202f", "\u205f", "\u3000", "\ufeff"]
#: Every code point Python calls white space (a superset of Unicode White_Space here).
PYTHON_SPACE = [chr(c) for c in range(0x3001) if chr(c).isspace()]


class _Texts(BaseModel):
    token: str = Field(pattern=TOKEN_PATTERN)
    named: str = Field(pattern=NOT_BLANK_PATTERN)


@pytest.mark.parametrize("space", sorted(set(ECMA_SPACE + PYTHON_SPACE)), ids=lambda c: f"U+{ord(c):04X}")
def test_text_of_only_white_space_and_a_token_with_white_space_are_refused_in_every_dialect(space: str):
    # Given a character some dialect calls white space
    # Then the server refuses it alone as a name and inside a token
    with pytest.raises(ValidationError):
        _Texts(token="a", named=space * 2)
    with pytest.raises(ValidationError):
        _Texts(token=f"a{space}b", named="a")
    # And the document's patterns, read by Python's re (as a client would), refuse them too
    assert not re.search(NOT_BLANK_PATTERN, space * 2)
    assert not re.search(TOKEN_PATTERN, f"a{space}b")


def test_ordinary_text_is_accepted_and_no_document_pattern_uses_the_ambiguous_escape():
    assert _Texts(token="ana@example.com", named=" Month end \u00e9 ")
    document = json.loads((Path(__file__).parents[2] / "shared/timekeeper/api/openapi.json").read_text())
    patterns: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("pattern"), str):
                patterns.append(node["pattern"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(document)
    assert patterns
    assert [p for p in patterns if "\\s" in p or "\\S" in p] == []
