-- fillfactor alone: room on the page for the new versions, every index as it is
ALTER TABLE schedule_runs SET (fillfactor = {fillfactor});
