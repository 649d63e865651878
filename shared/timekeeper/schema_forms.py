"""Whole forms for a published JSON schema: how a model whose fields depend on each other
(a chart names its columns, a table none) is published so that code generators keep
every field.

Generators (openapi-python-client, openapi-generator) read an object schema with a
``oneOf`` as a union of its members and drop the properties written beside it, so a
``oneOf`` of partial constraints loses the model's fields. :func:`whole_forms` publishes
instead ``oneOf`` complete forms: each is the model's schema with its own changes.
"""

from __future__ import annotations

import copy
from typing import Any


def whole_forms(schema: dict[str, Any], forms: list[dict[str, Any]]) -> None:
    """Replace ``schema`` (a model's JSON schema, in place) by ``oneOf`` whole forms.

    Each form is ``{"title": str, "properties": {name: schema or None}, "required":
    [names]}``: a copy of the model's schema less its title and description, with
    ``properties`` merged over the model's (None drops the property, and its name from
    ``required``), ``required`` added, and the form's title (a model name in a generated
    client). The schema keeps its title and description beside the ``oneOf``."""
    base = {k: v for k, v in schema.items() if k not in ("title", "description")}
    out = []
    for form in forms:
        whole = copy.deepcopy(base)
        whole["title"] = form["title"]
        properties = whole.setdefault("properties", {})
        required = list(whole.get("required", []))
        for name, value in form.get("properties", {}).items():
            if value is None:
                properties.pop(name, None)
                required = [r for r in required if r != name]
            else:
                properties[name] = copy.deepcopy(value)
        required += [r for r in form.get("required", []) if r not in required]
        if required:
            whole["required"] = required
        else:
            whole.pop("required", None)
        out.append(whole)
    kept = {k: schema[k] for k in ("title", "description") if k in schema}
    schema.clear()
    schema.update(kept, oneOf=out)
