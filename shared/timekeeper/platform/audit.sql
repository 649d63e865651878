-- The workspace's audit log and the trail of staff reads (timekeeper.platform.audit).

-- name: record_staff_read
INSERT INTO staff_reads (workspace_id, actor, what, detail, at) VALUES (%s, %s, %s, %s, %s) RETURNING id

-- name: record_staff_reads
-- Several reads of one workspace by one actor at one instant (a page that reads many
-- objects): a staff_reads row and a staff.read audit event each, in one statement.
WITH reads AS (
    INSERT INTO staff_reads (workspace_id, actor, what, detail, at)
    SELECT %(workspace_id)s, %(actor)s, %(what)s, t.d, %(at)s
      FROM unnest(%(details)s::jsonb[]) WITH ORDINALITY AS t(d, n) ORDER BY t.n
    RETURNING id)
INSERT INTO audit_events (workspace_id, actor, kind, subject_type, subject_id, before, after, reason, at)
SELECT %(workspace_id)s, %(actor)s, 'staff.read', %(what)s, NULL, '{}', t.d, NULL, %(at)s
  FROM unnest(%(details)s::jsonb[]) WITH ORDINALITY AS t(d, n) ORDER BY t.n

-- name: list_staff_reads
SELECT id, workspace_id, actor, what, detail, at FROM staff_reads
 WHERE workspace_id = %(workspace_id)s AND (%(before_id)s::bigint IS NULL OR id < %(before_id)s::bigint)
 ORDER BY id DESC
 LIMIT %(limit)s

-- name: record_event
INSERT INTO audit_events (workspace_id, actor, kind, subject_type, subject_id, before, after, reason, at)
VALUES (%(workspace_id)s, %(actor)s, %(kind)s, %(subject_type)s, %(subject_id)s, %(before)s, %(after)s,
        %(reason)s, %(at)s)
RETURNING id

-- name: list_older
-- A page of the log newest first, below the cursor's id; the optional area and actor use
-- their own (workspace_id, area|actor, id DESC) index.
SELECT e.id, e.workspace_id, e.actor, u.display_name AS actor_name, e.kind, e.subject_type, e.subject_id,
       e.before, e.after, e.reason, e.at
  FROM audit_events e LEFT JOIN users u ON u.id = e.actor
 WHERE e.workspace_id = %(workspace_id)s
   AND (%(area)s::text IS NULL OR e.area = %(area)s::text)
   AND (%(actor)s::text IS NULL OR e.actor = %(actor)s::text)
   AND (%(before_id)s::bigint IS NULL OR e.id < %(before_id)s::bigint)
 ORDER BY e.id DESC
 LIMIT %(limit)s

-- name: list_newer
-- The page just newer than the cursor's id (oldest first here; the caller reverses it).
SELECT e.id, e.workspace_id, e.actor, u.display_name AS actor_name, e.kind, e.subject_type, e.subject_id,
       e.before, e.after, e.reason, e.at
  FROM audit_events e LEFT JOIN users u ON u.id = e.actor
 WHERE e.workspace_id = %(workspace_id)s
   AND (%(area)s::text IS NULL OR e.area = %(area)s::text)
   AND (%(actor)s::text IS NULL OR e.actor = %(actor)s::text)
   AND e.id > %(after_id)s::bigint
 ORDER BY e.id ASC
 LIMIT %(limit)s

