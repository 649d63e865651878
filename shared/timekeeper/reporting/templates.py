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

**The complete message.** A body template must name ``{{ link }}`` (:func:`require_link`,
a 422 naming ``body_template`` at create and update). The rendered body is framed by
:func:`frame_message` into the message recipients get: an HTML document and a plain-text
part with the workspace's and schedule's names, the download link with the file's kind,
rows and expiry in the workspace's zone (:func:`format_instant`), why the recipient gets
it, and the opt-out link.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Any

import nh3
from jinja2 import StrictUndefined, Template, TemplateSyntaxError, nodes
from jinja2.sandbox import SandboxedEnvironment
from markupsafe import Markup

#: The placeholders a template may name.
PLACEHOLDERS = frozenset({"schedule_name", "recipient_name", "link", "link_expires_at", "row_count", "run_date",
                          "format"})
_ALLOWED_NODES = (nodes.Template, nodes.Output, nodes.TemplateData, nodes.Name)

#: The tags a body template's literal markup may use.
BODY_TAGS = frozenset({"a", "b", "blockquote", "br", "code", "div", "em", "h1", "h2", "h3", "h4", "hr", "i", "li",
                       "ol", "p", "pre", "small", "span", "strong", "table", "tbody", "td", "th", "thead", "tr",
                       "u", "ul"})
#: Stands for a placeholder while a body's literal markup is checked (a private-use character).
#: The bidirectional controls (embeddings, overrides, isolates, marks): a subject line
#: holds none, so a name saved with one cannot reverse the text after it in a mailbox.
BIDI_CONTROLS = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
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
        """``(subject, html body, text body)`` for ``values`` by placeholder name (the subject
        on one line, without bidirectional controls: :data:`BIDI_CONTROLS`). Raises
        ``jinja2.UndefinedError`` when a placeholder has no value. The HTML body is
        sanitized (:func:`sanitize_html`, the ``link`` value the only ``href``)."""
        link = values.get("link")
        return (" ".join(BIDI_CONTROLS.sub("", self._subject.render(values)).split()),
                self._sanitizer.clean(self._html.render(values), str(link) if link is not None else None),
                self._text.render(values))



# ------------------------------------------------------------------ the complete message

#: The placeholder every body template must contain: the message's reason to exist.
LINK_PLACEHOLDER = "link"


def require_link(text: str, field: str) -> None:
    """Raise :class:`TemplateInvalid` naming ``field`` unless the body template ``text``
    names the ``{{ link }}`` placeholder (a message without its download link is refused
    when the schedule is saved, not discovered by its recipients). ``text`` is a template
    :func:`check_template` accepted."""
    try:
        names = {node.name for node in _HTML.parse(text).find_all(nodes.Name)}
    except (TemplateSyntaxError, RecursionError, MemoryError):
        raise TemplateInvalid(field, "template syntax error") from None
    if LINK_PLACEHOLDER not in names:
        raise TemplateInvalid(field, "the body must contain the {{ link }} placeholder (the recipient's download "
                                     "link)")


def zone_of(zone_name: str) -> Any:
    """The ``ZoneInfo`` of the IANA zone ``zone_name``; an unknown name: UTC."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(zone_name)
    except (ZoneInfoNotFoundError, ValueError):
        return ZoneInfo("UTC")


def format_instant(instant: Any, zone_name: str) -> str:
    """``instant`` (an aware datetime) as people read it in the IANA zone ``zone_name``:
    ``Tuesday, 16 March 2027, 07:00 CET`` (an unknown zone: UTC)."""
    local = instant.astimezone(zone_of(zone_name))
    return f"{local:%A}, {local.day} {local:%B %Y, %H:%M} {local.tzname()}"


class _TextOf(HTMLParser):
    """Plain text of sanitized body HTML: blocks on their own lines, list items with a
    dash, a link's target after its label."""

    _BLOCKS = frozenset({"p", "div", "h1", "h2", "h3", "h4", "blockquote", "pre", "table", "tr", "ul", "ol", "hr"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._href: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self._BLOCKS:
            self.parts.append("\n\n")
        elif tag == "br":
            self.parts.append("\n")
        elif tag == "li":
            self.parts.append("\n- ")
        elif tag in ("td", "th"):
            self.parts.append("  ")
        elif tag == "a":
            self._href = dict(attrs).get("href")

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._href:
            self.parts.append(f" <{self._href}>")
            self._href = None
        elif tag in self._BLOCKS:
            self.parts.append("\n\n")

    def handle_data(self, data: str) -> None:
        self.parts.append(re.sub(r"\s+", " ", data))

    def text(self) -> str:
        lines = [line.strip() for line in "".join(self.parts).splitlines()]
        out: list[str] = []
        for line in lines:
            if line or (out and out[-1]):
                out.append(line)
        return "\n".join(out).strip()


def html_to_text(html: str) -> str:
    """The plain-text part of a message body: ``html`` (sanitized body markup) as text."""
    parser = _TextOf()
    parser.feed(html)
    parser.close()
    return parser.text()


@dataclass(frozen=True)
class MessageContext:
    """What frames a delivered message around its body: the workspace's and schedule's
    names, the schedule's owner (who added the recipient), the file's ``format`` and
    ``row_count`` (None: not counted), the link's expiry already formatted for people
    (:func:`format_instant`), and the recipient's opt-out URL."""

    workspace_name: str
    schedule_name: str
    owner_name: str
    recipient_name: str
    format: str
    row_count: int | None
    link: str
    link_expires: str
    opt_out_url: str


def _frame(name: str, environment: SandboxedEnvironment) -> Template:
    """A message frame of this package (``message.html.j2``, ``message.txt.j2``), compiled once."""
    from importlib.resources import files

    return environment.from_string(files("timekeeper.reporting").joinpath(name).read_text(encoding="utf-8"))


#: The frames every delivered message is put in (the product's own templates, not a user's).
_FRAME = _frame("message.html.j2", _HTML)

_TEXT_FRAME = _frame("message.txt.j2", _TEXT)


def _file_facts(context: MessageContext) -> tuple[str, str]:
    label = "report" if context.format == "pdf" else "file"
    kind = {"pdf": "PDF report", "csv": "CSV file", "xlsx": "Excel workbook (XLSX)"}.get(context.format,
                                                                                       context.format.upper())
    if context.row_count is None:
        return label, kind
    rows = "1 row" if context.row_count == 1 else f"{context.row_count:,} rows"
    return label, f"{kind}, {rows}"


def frame_message(subject: str, body_html: str, context: MessageContext) -> tuple[str, str]:
    """The complete message around a rendered body (:meth:`Message.render`'s sanitized
    HTML): ``(html, text)``. HTML: a full document with the workspace's and schedule's
    names, the body, a download button with the file's kind, rows and the link's expiry,
    and a footer saying why the recipient gets it with the opt-out link. Text: the same in
    plain text (the body through :func:`html_to_text`). Every value is escaped in the HTML."""
    label, facts = _file_facts(context)
    html = _FRAME.render(subject=subject, body=Markup(body_html), c=context, file_label=label, file_facts=facts)
    text = _TEXT_FRAME.render(body=html_to_text(body_html), c=context, file_label=label, file_facts=facts)
    return html, text
