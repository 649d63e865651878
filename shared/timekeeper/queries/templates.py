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
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jinja2 import StrictUndefined, TemplateSyntaxError, nodes
from jinja2.sandbox import SandboxedEnvironment

#: The placeholders a template may name.
PLACEHOLDERS = frozenset({"schedule_name", "recipient_name", "link", "link_expires_at", "row_count", "run_date",
                          "format"})
_ALLOWED_NODES = (nodes.Template, nodes.Output, nodes.TemplateData, nodes.Name)

_HTML = SandboxedEnvironment(autoescape=True, undefined=StrictUndefined)
_TEXT = SandboxedEnvironment(autoescape=False, undefined=StrictUndefined)


class TemplateInvalid(ValueError):
    """A template is refused: ``field`` names it (e.g. ``subject_template``), ``reason``
    says why (safe to show; never repeats the template)."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


def check_template(text: str, field: str) -> None:
    """Raise :class:`TemplateInvalid` unless ``text`` is text and :data:`PLACEHOLDERS` only."""
    try:
        tree = _HTML.parse(text)
    except TemplateSyntaxError as error:
        raise TemplateInvalid(field, f"template syntax error on line {error.lineno}") from None
    for node in tree.find_all(nodes.Node):
        if not isinstance(node, _ALLOWED_NODES):
            raise TemplateInvalid(field, "only named placeholders such as {{ recipient_name }} are allowed")
        if isinstance(node, nodes.Name) and node.name not in PLACEHOLDERS:
            raise TemplateInvalid(field, f"unknown placeholder; allowed: {', '.join(sorted(PLACEHOLDERS))}")


class Message:
    """A schedule's subject and body templates, compiled once (a run renders them for
    every recipient)."""

    def __init__(self, subject_template: str, body_template: str) -> None:
        self._subject = _TEXT.from_string(subject_template)
        self._html = _HTML.from_string(body_template)
        self._text = _TEXT.from_string(body_template)

    def render(self, values: Mapping[str, Any]) -> tuple[str, str, str]:
        """``(subject, html body, text body)`` for ``values`` by placeholder name. Raises
        ``jinja2.UndefinedError`` when a placeholder has no value."""
        return " ".join(self._subject.render(values).split()), self._html.render(values), self._text.render(values)


def render_message(subject_template: str, body_template: str, values: Mapping[str, Any]) -> tuple[str, str, str]:
    """``(subject, html body, text body)`` of a delivery: ``values`` by placeholder name
    (:class:`Message` compiled for one use). Raises ``jinja2.UndefinedError`` when a
    placeholder has no value."""
    return Message(subject_template, body_template).render(values)
