"""Saved queries with immutable versions, reports, and exports of a query version to CSV
or XLSX: definitions are structured (entity, columns, filters, sort, limit), validated
against a catalogue and compiled to parameterized, workspace-scoped SQL."""
