-- A report's emptiness: the rows each section of a render showed, in section order
-- (report_renders.section_row_counts; NULL for renders made before it was recorded, which
-- count as not empty). A delivery of a report records them beside its file
-- (query_delivery_sources.section_row_counts; row_count is their sum), so a schedule that
-- skips empty results skips a report whose every section returned no rows.
ALTER TABLE report_renders ADD COLUMN section_row_counts integer[]
    CHECK (section_row_counts IS NULL OR 0 <= ALL (section_row_counts));
ALTER TABLE query_delivery_sources ADD COLUMN section_row_counts integer[];
