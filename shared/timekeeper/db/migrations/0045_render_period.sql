-- A render may pick the month its snapshot sections show (the console's period picker:
-- a published period opens the report over it). PostgreSQL 15 compatible.
--
-- report_renders.period: the month's first day, or NULL (each section's own choice).
-- When set, every snapshot section whose choice is latest or month shows that month's
-- current published version; a section pinned to a version keeps its pin. The render's
-- snapshot_basis records what each section showed, as before.
ALTER TABLE report_renders ADD COLUMN period date CHECK (period IS NULL OR extract(day FROM period) = 1);
