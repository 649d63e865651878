"""Subject and body templates of scheduled deliveries (Jinja2, sandboxed).

A template may contain text and named placeholders only: ``{{ schedule_name }}``,
``{{ recipient_name }}``, ``{{ link }}``, ``{{ link_expires_at }}``, ``{{ row_count }}``,
``{{ run_date }}``, ``{{ format }}`` (:data:`PLACEHOLDERS`). No attribute or item access,
no filters, no tags, no expressions: :func:`check_template` refuses them when a schedule is
saved, so a stored template cannot reach anything but the values the delivery passes in.
Rendering uses a :class:`~jinja2.sandbox.SandboxedEnvironment` all the same, with
``StrictUndefined``. The body is HTML with autoescape on (a member's name with ``<`` is
text, not markup); the subject is a plain-text header, rendered without HTML escaping
and with line breaks folded to spaces.

**The body's own markup.** The literal HTML a body template holds is restricted to
:data:`BODY_TAGS` (text formatting, lists, tables; no scripts, forms, images, styles or
comments) with one attribute: ``href`` on ``<a>``, whose value must be exactly
``{{ link }}`` (so a message from the service's sender links to its own download and
nowhere else). :func:`check_template` refuses anything else when a schedule is saved
(:class:`TemplateInvalid` naming ``body_template``); :meth:`Message.render` passes the
rendered HTML through the nh3 sanitizer with the same allowlist all the same (a template
saved before the rule, or a parser disagreement, still cannot send other markup).
Placeholder values stay autoescaped.
"""

from __future__ import annotations

from collections.abc import Mapping
from html.parser import HTMLParser
from typing import Any

import nh3
from jinja2 import StrictUndefined, TemplateSyntaxError, nodes
from jinja2.sandbox import SandboxedEnvironment

#: The placeholders a template may name.
PLACEHOLDERS = frozenset({"schedule_name", "recipient_name", "link", "link_expires_at", "row_count", "run_date",
                          "format"})
_ALLOWED_NODES = (nodes.Template, nodes.Output, nodes.TemplateData, nodes.Name)

#: The tags a body template's literal markup may use.
BODY_TAGS = frozenset({"a", "b", "blockquote", "br", "code", "div", "em", "h1", "h2", "h3", "h4", "hr", "i", "li",
                       "ol", "p", "pre", "small", "span", "strong", "table", "tbody", "td", "th", "thead", "tr",
                       "u", "ul"})
#: Stands for a placeholder while a body's literal markup is checked (a private-use character).
_MARK = "\ue000"
_LINK_MARK = f"{_MARK}link{_MARK}"

_HTML = SandboxedEnvironment(autoescape=True, undefined=StrictUndefined)
_TEXT = SandboxedEnvironment(autoescape=False, undefined=StrictUndefined)


class TemplateInvalid(ValueError):
    """A template is refused: ``field`` names it (e.g. ``subject_template``), ``reason``
    says why (safe to show; never repeats the template)."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


def check_template(text: str, field: str, *, html: bool = False) -> None:
    """Raise :class:`TemplateInvalid` (naming ``field``) unless ``text`` is text and
    :data:`PLACEHOLDERS` only; with ``html`` (the body) its literal markup must also keep
    to :data:`BODY_TAGS` with ``href="{{ link }}"`` as the only attribute. Input the
    template parser cannot handle (e.g. expressions nested hundreds deep, which exhaust
    its recursion) is refused the same way."""
    try:
        tree = _HTML.parse(text)
        found = list(tree.find_all(nodes.Node))
    except TemplateSyntaxError as error:
        raise TemplateInvalid(field, f"template syntax error on line {error.lineno}") from None
    except (RecursionError, MemoryError):
        raise TemplateInvalid(field, "the template is nested too deeply") from None
    for node in found:
        if not isinstance(node, _ALLOWED_NODES):
            raise TemplateInvalid(field, "only named placeholders such as {{ recipient_name }} are allowed")
        if isinstance(node, nodes.Name) and node.name not in PLACEHOLDERS:
            raise TemplateInvalid(field, f"unknown placeholder; allowed: {', '.join(sorted(PLACEHOLDERS))}")
    if html:
        _check_markup(tree, field)


def _skeleton(tree: nodes.Template) -> str:
    """The template's literal text with each placeholder replaced by a marker."""
    parts: list[str] = []
    for output in tree.find_all(nodes.Output):
        for node in output.nodes:
            if isinstance(node, nodes.TemplateData):
                parts.append(node.data)
            elif isinstance(node, nodes.Name):
                parts.append(f"{_MARK}{node.name}{_MARK}")
    return "".join(parts)


class _MarkupCheck(HTMLParser):
    """Collects the first reason a body's literal markup breaks the allowlist."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.reason: str | None = None

    def _refuse(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in BODY_TAGS:
            self._refuse(f"the tag <{tag}> is not allowed; allowed: {', '.join(sorted(BODY_TAGS))}")
            return
        for name, value in attrs:
            if not (tag == "a" and name == "href" and value == _LINK_MARK):
                self._refuse("the only attribute allowed is href=\"{{ link }}\" on <a>")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)

    def handle_endtag(self, tag: str) -> None:
        if tag not in BODY_TAGS:
            self._refuse(f"the tag </{tag}> is not allowed")

    def handle_comment(self, data: str) -> None:
        self._refuse("HTML comments are not allowed")

    def handle_decl(self, decl: str) -> None:
        self._refuse("declarations are not allowed")

    def handle_pi(self, data: str) -> None:
        self._refuse("processing instructions are not allowed")

    def unknown_decl(self, data: str) -> None:
        self._refuse("declarations are not allowed")


def _check_markup(tree: nodes.Template, field: str) -> None:
    skeleton = _skeleton(tree)
    if f"<{_MARK}" in skeleton or f"</{_MARK}" in skeleton:
        raise TemplateInvalid(field, "a placeholder cannot name a tag")
    checker = _MarkupCheck()
    checker.feed(skeleton)
    checker.close()
    if checker.reason is not None:
        raise TemplateInvalid(field, checker.reason)


class _Sanitizer:
    """An nh3 cleaner restricted to :data:`BODY_TAGS`, keeping ``href`` on ``<a>`` only when
    it is exactly the link of the current call (comments, scripts and styles removed with
    their content). Built once per :class:`Message` (one run, one thread)."""

    def __init__(self) -> None:
        self._link: str | None = None
        self._cleaner = nh3.Cleaner(tags=set(BODY_TAGS), attributes={"a": {"href"}}, strip_comments=True,
                                    url_schemes={"https", "http"}, attribute_filter=self._keep)

    def _keep(self, element: str, attribute: str, value: str) -> str | None:
        return value if element == "a" and attribute == "href" and value == self._link else None

    def clean(self, html: str, link: str | None) -> str:
        self._link = link
        try:
            return self._cleaner.clean(html)
        finally:
            self._link = None


def sanitize_html(html: str, link: str | None) -> str:
    """``html`` restricted by nh3 to :data:`BODY_TAGS`, with ``href`` kept on ``<a>`` only
    when it is exactly ``link`` (comments, scripts and styles removed with their content)."""
    return _Sanitizer().clean(html, link)


class Message:
    """A schedule's subject and body templates, compiled once (a run renders them for
    every recipient)."""

    def __init__(self, subject_template: str, body_template: str) -> None:
        self._subject = _TEXT.from_string(subject_template)
        self._html = _HTML.from_string(body_template)
        self._text = _TEXT.from_string(body_template)
        self._sanitizer = _Sanitizer()

    def render(self, values: Mapping[str, Any]) -> tuple[str, str, str]:
        """``(subject, html body, text body)`` for ``values`` by placeholder name. Raises
        ``jinja2.UndefinedError`` when a placeholder has no value. The HTML body is
        sanitized (:func:`sanitize_html`, the ``link`` value the only ``href``)."""
        link = values.get("link")
        return (" ".join(self._subject.render(values).split()),
                self._sanitizer.clean(self._html.render(values), str(link) if link is not None else None),
                self._text.render(values))

