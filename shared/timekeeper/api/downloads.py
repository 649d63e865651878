"""The ``Content-Disposition`` of every download the API offers, built in one place.

A file's name often comes from what a user typed (a schedule's name). It never reaches the
header raw: the header carries a safe ASCII slug as ``filename`` (letters, digits, ``.``,
``_``, ``-``; no path, no quote, no control character) for clients that know no more, and
the readable name as RFC 6266 ``filename*`` in RFC 5987's UTF-8 percent-encoding, with
path separators and control characters replaced. The value is pure ASCII, so it survives
HTTP headers and presigned S3 parameters (``ResponseContentDisposition``) alike.
"""

from __future__ import annotations

import re
import unicodedata
from urllib.parse import quote

#: Longest slug and longest readable name taken from the user's part (characters; the
#: trusted suffix comes on top).
MAX_SLUG_CHARS = 80
MAX_READABLE_CHARS = 150

_SAFE_SUFFIX = re.compile(r"[A-Za-z0-9._-]*")
_NOT_SLUG = re.compile(r"[^A-Za-z0-9._-]+")
_UNREADABLE = re.compile(r"[\x00-\x1f\x7f-\x9f/\\]+")
# RFC 5987 attr-char beyond letters and digits (quote() keeps "-._~" and alphanumerics)
_ATTR_CHARS = "!#$&+^`|"


def file_slug(name: str, *, default: str = "download") -> str:
    """An ASCII file-name stem for ``name``: accents dropped (``Überfällig`` -> ``Uberfallig``),
    every other run of characters outside ``A-Za-z0-9._-`` one ``-``, no run of dots, no
    leading or trailing ``.``/``-``/``_``, at most :data:`MAX_SLUG_CHARS` characters;
    ``default`` when nothing is left (``"日報"``, ``"..."``)."""
    ascii_text = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode("ascii")
    slug = re.sub(r"\.{2,}", ".", _NOT_SLUG.sub("-", ascii_text))
    slug = re.sub(r"-{2,}", "-", slug)[:MAX_SLUG_CHARS].strip(".-_")
    return slug or default


def readable_name(name: str, *, default: str = "download") -> str:
    """``name`` as people should read it (NFC), with every run of control characters and
    path separators one ``-``, without leading or trailing spaces, dots or dashes, at most
    :data:`MAX_READABLE_CHARS` characters; ``default`` when nothing is left."""
    text = _UNREADABLE.sub("-", unicodedata.normalize("NFC", name))[:MAX_READABLE_CHARS].strip(" .-")
    return text or default


def attachment(name: str, *, suffix: str = "", default: str = "download") -> str:
    """The ``Content-Disposition`` value offering a download as ``name`` + ``suffix``:
    ``attachment; filename="<slug><suffix>"; filename*=UTF-8''<readable name, encoded><suffix>``.

    ``name`` may be anything a user typed; ``suffix`` is the product's own tail (``-<run
    id>.csv``) and must hold only ``A-Za-z0-9._-`` (``ValueError`` otherwise). ``default``
    stands for a name with nothing usable left. The result is ASCII without control
    characters, e.g. ``attachment("Überfällig", suffix="-1.csv")`` ->
    ``attachment; filename="Uberfallig-1.csv"; filename*=UTF-8''%C3%9Cberf%C3%A4llig-1.csv``.
    """
    if not _SAFE_SUFFIX.fullmatch(suffix):
        raise ValueError(f"unsafe file-name suffix {suffix!r}")
    fallback = file_slug(name, default=default) + suffix
    encoded = quote(readable_name(name, default=default) + suffix, safe=_ATTR_CHARS, encoding="utf-8")
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{encoded}"
