-- Staff set a workspace's claim weight (its tier in the dispatcher's fair claim).
-- PostgreSQL 15 compatible.
--
-- The weight is 1-10 (the API's bounds; the column allowed up to 100 and nothing set it):
-- a workspace of weight 10 beside one of weight 1 gets ten elevenths of a crowded batch.
-- The API changes it in the entered workspace (the tenant policy of workspaces applies), and
-- staff read every workspace's weight, name, zone and state through the narrow function
-- below (nothing else of the directory), filtered by a part of the name, by name.
ALTER TABLE workspaces DROP CONSTRAINT workspaces_claim_weight_check;
ALTER TABLE workspaces ADD CONSTRAINT workspaces_claim_weight_check CHECK (claim_weight BETWEEN 1 AND 10);

GRANT UPDATE (claim_weight) ON workspaces TO timekeeper_api;

CREATE FUNCTION staff_claim_weights(p_search text, p_limit integer)
RETURNS TABLE (id uuid, name text, timezone text, status text, claim_weight smallint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT w.id, w.name, w.timezone, w.status, w.claim_weight
      FROM workspaces w
     WHERE p_search IS NULL OR strpos(lower(w.name), lower(p_search)) > 0
     ORDER BY lower(w.name), w.id
     LIMIT least(greatest(p_limit, 0), 1000)
$$;
REVOKE ALL ON FUNCTION staff_claim_weights(text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION staff_claim_weights(text, integer) TO timekeeper_api;
