"""The snapshots' pages: a workspace's periods (staff: any workspace's, with the re-run and
backfill requests), a period's versions, the period picker (the reports reading a
month's snapshot, rendered over it) and a render's page."""

from __future__ import annotations

import re
import uuid
from http import HTTPStatus
from typing import Any
from urllib.parse import quote, urlencode

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router

from timekeeper.console import glossary
from timekeeper.console.context import Request, checked_post, signed_in
from timekeeper.console.display import when, zone_of
from timekeeper.console.paths import PREFIX, way_back

router = Router()

#: A month as the period picker takes it (``YYYY-MM``, January to December).
MONTH_TEXT = re.compile(r"[1-9][0-9]{3}-(0[1-9]|1[0-2])")
#: What the snapshots page's "Show" filter offers: overdue, or a period status.
PERIOD_FILTERS = ("overdue", "published", "missing", "failed", "skipped", "planned", "queued", "running",
                  "retry_wait")
#: At most this many API pages (of 100 periods) one filtered snapshots page reads through.
PERIOD_READS = 10
#: The states of a run still at work: a period with one takes no new request.
ACTIVE_STATES = ("planned", "queued", "running", "retry_wait")
#: The console's interface language, the one its pages write dates, counts and amounts in.
INTERFACE_LOCALE = "en_US"
#: A month as the console's addresses name it.
MONTH_PATTERN = re.compile(r"[1-9][0-9]{3}-(0[1-9]|1[0-2])")


def snapshot_readers(ctx: Request) -> set[tuple[str, str]] | None:
    """The snapshots (``(owner, type)``) the current version of one of the workspace's
    reports reads (its first 200 reports; each report's ``snapshot_sources``): where
    "Open a report over this month" leads somewhere. None when the API refuses the
    person the reports (e.g. their membership does not grant reading them)."""
    client = ctx.api()
    reply = client.call("GET", "/reports", query={"limit": "200"})
    if reply.status != 200 or not isinstance(reply.body, dict):
        return None
    read: set[tuple[str, str]] = set()
    for item in reply.body["items"]:
        detail = client.call("GET", f"/reports/{quote(str(item['id']), safe='')}")
        if detail.status == 200 and isinstance(detail.body, dict):
            read.update((s["owner"], s["snapshot_type"]) for s in detail.body.get("snapshot_sources") or [] if s)
    return read


def workspace_matches(ctx: Request, name: str) -> list[dict[str, Any]] | None:
    """Staff's workspaces whose name contains ``name`` (``GET /snapshots/staff/workspaces``,
    at most 20), or None when the API refuses."""
    reply = ctx.api().call("GET", "/snapshots/staff/workspaces", query={"search": name, "limit": "20"})
    return reply.body["items"] if reply.status == 200 and isinstance(reply.body, dict) else None


def row_action(item: dict[str, Any]) -> str | None:
    """The request staff may make of a listed period: ``backfill`` (never planned),
    ``manual`` (a re-run: settled, not protected, nothing in progress) or None."""
    if item["status"] == "missing":
        return "backfill"
    if item.get("protection") or (item.get("latest_state") or item["status"]) in ACTIVE_STATES:
        return None
    return "manual" if item["status"] in ("published", "failed", "skipped", "cancelled") else None


def periods_page(ctx: Request, *, workspace: str | None = None, problem: str | None = None,
                 done: str | None = None, status_code: int = 200, typed: dict[str, str] | None = None,
                 done_link: dict[str, str] | None = None) -> Response:
    """A workspace's periods: the person's own, or for staff the one ``workspace``
    names (else the page's ``workspace`` parameter). A status filter (``status``, one
    of :data:`PERIOD_FILTERS`) reads on through the API's pages until a page has
    periods to show or the listing ends; "More periods" is offered only when the API
    has more; an unknown filter is a 422 naming ``status``."""
    params = ctx.params
    if workspace is None:
        workspace = params.get("workspace") or ""
    workspace = workspace.strip() if ctx.session.staff else ""
    name = (params.get("name") or "").strip()[:200] if ctx.session.staff else ""
    if name:  # staff look a workspace up by name: one match is it, several are offered
        matches = workspace_matches(ctx, name)
        if matches is None:
            return ctx.page("error.html", HTTPStatus.FORBIDDEN, title="Not allowed",
                            message="Looking workspaces up is for snapshot staff.")
        if len(matches) != 1:
            return ctx.page("snapshot_workspaces.html", HTTPStatus.OK if matches else HTTPStatus.NOT_FOUND,
                            name=name, matches=matches, status=params.get("status") or "")
        workspace = str(matches[0]["id"])
    if workspace:
        try:
            workspace = str(uuid.UUID(workspace))
        except ValueError:
            return ctx.page("error.html", HTTPStatus.UNPROCESSABLE_ENTITY, title="Refused",
                            message="The workspace must be a workspace id, a UUID (workspace).",
                            back=("/snapshots", "Back to the snapshots"))
    only = params.get("status") or ""
    refused = bool(only) and only not in PERIOD_FILTERS
    if refused:
        problem, status_code, only = (f"Refused: there is no status “{only[:40]}” to show (status); choose one "
                                      "from the list."), HTTPStatus.UNPROCESSABLE_ENTITY, ""
    path = f"/snapshots/workspaces/{workspace}/periods" if workspace else "/snapshots/periods"
    client = ctx.api()
    cursor, later = params.get("cursor"), bool(params.get("cursor"))
    raw: list[dict[str, Any]] = []
    body: dict[str, Any] = {}
    for _ in range(PERIOD_READS if only else 1):
        reply = client.call("GET", path, query={"cursor": cursor, "limit": "100"})
        if reply.status != 200:
            return ctx.api_error(reply)
        body = reply.body
        found = [item for item in body["items"]
                 if not only or (item["overdue"] if only == "overdue" else item["status"] == only)]
        raw.extend(found)
        cursor = body.get("next_cursor")
        if found or not cursor:
            break
    if refused:
        raw, cursor = [], None
    zone = body.get("timezone") or "UTC"
    # The console speaks English: dates, counts and amounts read as its interface does (the
    # workspace's locale is for its files and messages).
    locale = INTERFACE_LOCALE
    may_render = workspace in ("", ctx.session.workspace_id) and ctx.session.has("reports:read")
    readers = snapshot_readers(ctx) if may_render and any(i["status"] == "published" for i in raw) else set()
    if readers is None:  # the API refuses them the reports: no action to offer
        may_render, readers = False, set()
    items = [{**item, "published": when(item.get("published_at"), zone),
              "basis_lines": glossary.basis_lines(item.get("basis"), locale),
              "read_by_report": (item["owner"], item["snapshot_type"]) in readers,
              "link": f"{PREFIX}/snapshots/periods/{quote(item['owner'], safe='')}/"
                      f"{quote(item['snapshot_type'], safe='')}/{quote(item['period'], safe='')}"
                      + (f"?{urlencode({'workspace': workspace})}" if workspace else ""),
              "action": row_action(item) if ctx.session.staff else None}
             for item in raw]
    # Without a filter, the long tail of months never planned (and no longer overdue) is
    # folded behind its count: what needs attention comes first.
    folded = [] if only else [i for i in items if i["status"] == "missing" and not i["overdue"]]
    items = [i for i in items if i not in folded]
    # The enabled types as the API lists them: the staff request form's choices.
    types = [(t["owner"], t["snapshot_type"]) for t in body.get("types") or []]
    query = {k: v for k, v in {"workspace": workspace, "status": only, "cursor": cursor}.items() if v}
    first = f"{PREFIX}/snapshots?" + urlencode({k: v for k, v in query.items() if k != "cursor"})
    return ctx.page("snapshots.html", status_code, items=items, folded=folded, zone=zone,
                    workspace=body.get("workspace_id"), workspace_name=body.get("workspace_name") or "",
                    chosen_workspace=workspace, only=only, later=later, typed=typed or {},
                    problem=problem, done=done, done_link=done_link, types=types, first_page=first.rstrip("?"),
                    next_page=f"{PREFIX}/snapshots?" + urlencode(query) if cursor else None, refused=refused,
                    # Renders are of the person's own workspace's reports (the API decides).
                    may_render=may_render, request_key=str(uuid.uuid4()))


@router.get(f"{PREFIX}/snapshots")
@signed_in
def snapshots(ctx: Request) -> Response:
    """``GET /console/snapshots``: the periods page (:func:`periods_page`)."""
    params = ctx.params
    requested = params.get("requested") or ""
    link = None
    if params.get("done") == "requested" and re.fullmatch(r"[a-z][a-z0-9_]{0,63}:[a-z][a-z0-9_]{0,63}:"
                                                           r"[1-9][0-9]{3}-(0[1-9]|1[0-2])", requested):
        owner, snapshot_type, month = requested.split(":")
        link = {"href": f"{PREFIX}/snapshots/periods/{owner}/{snapshot_type}/{month}"
                        + (f"?{urlencode({'workspace': params['workspace']})}" if params.get("workspace") else ""),
                "text": f"{glossary.words(snapshot_type)} {month}"}
    return periods_page(ctx, done="Your request was recorded; it waits for admission."
                        if params.get("done") == "requested" else None, done_link=link)


#: What a version's staff action is called on its page, and what its state must be.
RUN_ACTIONS = {"cancel": ("planned", "queued"), "finalize": ("published",)}


def waits_for(versions: list[dict[str, Any]], admission: dict[str, Any] | None, zone: str) -> str:
    """What the period waits for, in words ("" when nothing: published), by its newest
    version (``versions``: the API's, newest first; none: never planned) and the admission
    rule (``admission``: the API's counts, staff only)."""
    if not versions:
        return "Never planned: a backfill plans it."
    newest = versions[0]
    state = newest["state"]
    if state == "planned" and admission:
        lane, cap = admission["backfill_lane"], admission["cap"]
        every = admission["pass_every_minutes"]
        regular = admission["in_flight"] - admission["backfills_in_flight"]
        if admission["backfill"]:
            free = min(lane - admission["backfills_in_flight"], cap - admission["in_flight"])
        else:
            free = (cap - lane if admission["backfill_active"] else cap) - regular
        if free > admission["ahead"]:
            return (f"Planned: the next admission pass (every {every} minute{'s' if every > 1 else ''}) "
                    "admits it.")
        return (f"Waiting for admission: {admission['in_flight']} running or queued of this module's snapshots "
                f"(cap {cap}, {lane} kept for backfills), {admission['ahead']} planned before it; admission "
                f"passes run every {every} minute{'s' if every > 1 else ''}.")
    if state == "planned":
        return "Planned: waits for admission (a pass every minute admits the oldest, at most a few at once)."
    if state == "queued":
        return "Admitted: its attempt starts when the job queue delivers it."
    if state == "running":
        return f"Running: {chunks(newest.get('chunks_committed'))} done."
    if state == "retry_wait":
        due = when(newest.get("retry_due_at"), zone)
        return "An attempt failed; it is tried again" + (f" at {due['local']} ({due['utc']})." if due else ".")
    current = next((v for v in versions if v.get("current")), None)
    if current and current.get("protection") == "finalized":
        return (f"Finalized (version {current['version']}): no re-run or backfill; staff finalized it, so it is "
                "kept as it is.")
    if state == "failed":
        return f"Failed: {glossary.words(newest.get('failure_code'))}. A re-run makes a new version."
    if current and current.get("protection"):
        return (f"Published (version {current['version']}), read into a delivered report: it is kept as it is, "
                "no re-run.")
    if current:
        return f"Published (version {current['version']})."
    if state == "cancelled":
        return "Cancelled: the month waits for a re-run to publish."
    return ""


def chunks(n: object) -> str:
    """``"1 chunk"``, ``"4 chunks"``: a count of committed chunks in words (None: 0)."""
    count = n if isinstance(n, int) else 0
    return f"{count} chunk{'' if count == 1 else 's'}"


def period_request(versions: list[dict[str, Any]], staff: bool) -> str | None:
    """The request staff may make from the period's page: ``backfill`` (never planned),
    ``manual`` (a re-run: nothing in progress, the current version not protected) or None."""
    if not staff:
        return None
    if not versions:
        return "backfill"
    if any(v["state"] in ACTIVE_STATES for v in versions) or any(v.get("current") and v.get("protection")
                                                                    for v in versions):
        return None
    return "manual"


def period_page(ctx: Request, *, owner: str, snapshot_type: str, period: str, workspace: str = "",
                problem: dict[str, str] | None = None, done: str | None = None, status_code: int = 200) -> Response:
    """One period's versions, newest first, with their attempts, chunks, failure codes (in
    words beside the code), requester and reason, and for staff the actions each version
    allows (cancel a planned or queued one, finalize a published one, with a reason): the
    person's own workspace, or for staff the one ``workspace`` names. ``problem``: a
    refused action (``run_id``, ``action``, ``message``, ``field``, the typed ``reason``)."""
    if not MONTH_PATTERN.fullmatch(period):
        return ctx.page("error.html", HTTPStatus.UNPROCESSABLE_ENTITY, title="Refused",
                        message="The month must be written YYYY-MM.")
    workspace = workspace.strip() if ctx.session.staff else ""
    target = workspace or ctx.session.workspace_id
    reply = ctx.api().call("GET", "/snapshots/workspaces/" + "/".join(
        quote(part, safe="") for part in (target, "periods", owner, snapshot_type, period)))
    if reply.status != 200:
        return ctx.api_error(reply)
    zone = reply.body.get("timezone") or "UTC"
    versions = [{**v, "created": when(v["created_at"], zone), "published": when(v.get("published_at"), zone),
                 "started": when(v.get("started_at"), zone), "cancelled": when(v.get("cancelled_at"), zone),
                 "finalized": when(v.get("finalized_at"), zone), "why": glossary.words(v.get("failure_code")),
                 "failed": when(v.get("failed_at"), zone), "chunks": chunks(v.get("chunks_committed")),
                 "range_link": f"{PREFIX}/snapshots/ranges/{quote(str(v['request_group']), safe='')}"
                 if ctx.session.staff and v.get("request_group") else None,
                 "actions": [a for a, states in RUN_ACTIONS.items() if ctx.session.staff and v["state"] in states
                             and not (a == "finalize" and v.get("protection") == "finalized")]}
                for v in reply.body["versions"]]
    back = f"{PREFIX}/snapshots" + (f"?{urlencode({'workspace': workspace})}" if workspace else "")
    return ctx.page("period.html", status_code, p=reply.body, versions=versions, zone=zone, back=back,
                    problem=problem, done=done, workspace=str(reply.body.get("workspace_id") or target),
                    waits=waits_for(versions, reply.body.get("admission"), zone),
                    request=period_request(versions, ctx.session.staff), request_key=str(uuid.uuid4()))


@router.get(f"{PREFIX}/snapshots/periods/<owner>/<snapshot_type>/<period>")
@signed_in
def period_versions(ctx: Request, owner: str, snapshot_type: str, period: str) -> Response:
    """``GET /console/snapshots/periods/{owner}/{type}/{YYYY-MM}``: :func:`period_page` (the
    ``workspace`` parameter for staff; ``done`` after an action)."""
    params = ctx.params
    done = {"cancelled": "The request was cancelled.", "finalized": "The version was finalized.",
            "requested": "Your request was recorded; it waits for admission."}.get(params.get("done") or "")
    return period_page(ctx, owner=owner, snapshot_type=snapshot_type, period=period,
                       workspace=params.get("workspace") or "", done=done)


@router.post(f"{PREFIX}/snapshots/runs/<run_id>/<action>")
@checked_post
def run_action(ctx: Request, run_id: str, action: str) -> Response:
    """``POST /console/snapshots/runs/{run_id}/{cancel|finalize}``: staff cancel a planned or
    queued run, or finalize a published version, with a reason (the API's
    ``POST /snapshots/workspaces/{id}/runs/{run_id}/{action}``), then the period's page; a
    refusal is shown there on the version's form, the reason kept as typed."""
    fields = ctx.fields
    owner, snapshot_type, period = (fields.get(k, "")[:100] for k in ("owner", "snapshot_type", "period"))
    workspace = fields.get("workspace", "").strip()[:100]
    if action not in RUN_ACTIONS:
        return ctx.page("error.html", HTTPStatus.NOT_FOUND, title="Not found", message="There is no such action.")
    reason = fields.get("reason", "")
    reply = ctx.api().call("POST", "/snapshots/workspaces/" + "/".join(
        quote(part, safe="") for part in (workspace, "runs", run_id, action)), body={"reason": reason})
    page = f"{PREFIX}/snapshots/periods/" + "/".join(quote(x, safe="") for x in (owner, snapshot_type, period))
    if reply.status == 200:
        done = "cancelled" if action == "cancel" else "finalized"
        return ctx.redirect(page + "?" + urlencode({"workspace": workspace, "done": done}))
    if reply.status in (401, 403, 404) or not MONTH_PATTERN.fullmatch(period):
        return ctx.api_error(reply)
    body = reply.body if isinstance(reply.body, dict) else {}
    problem = {"run_id": run_id, "action": action, "message": body.get("message") or "The action was refused.",
               "field": body.get("field") or "", "reason": reason[:500]}
    return period_page(ctx, owner=owner, snapshot_type=snapshot_type, period=period, workspace=workspace,
                       problem=problem, status_code=reply.status if 400 <= reply.status < 500 else 502)


@router.post(f"{PREFIX}/snapshots/requests")
@checked_post
def snapshot_request(ctx: Request) -> Response:
    """``POST /console/snapshots/requests``: staff's re-run or backfill request (``POST
    /snapshots/runs`` with the form's Idempotency-Key, made when the form was shown: a
    repeated click answers the first click's answer instead of planning again or showing
    the first's run as a refusal); a refusal is shown on the periods page."""
    body = {name: ctx.fields.get(name, "").strip() for name in
            ("owner", "snapshot_type", "workspace_id", "period", "mode", "reason")}
    if ctx.fields.get("type"):  # the form's choice of a registered type: "<owner>:<type>"
        body["owner"], _, body["snapshot_type"] = ctx.fields["type"].strip().partition(":")
    reply = ctx.api().call("POST", "/snapshots/runs", body=body, headers=form_key(ctx))
    from_period = ctx.fields.get("form") == "period" and MONTH_PATTERN.fullmatch(body["period"])
    if from_period and reply.status not in (401, 403):
        return _period_request_answer(ctx, body, reply)
    if reply.status in (200, 201):
        return ctx.redirect(f"{PREFIX}/snapshots?" + urlencode({
            "workspace": body["workspace_id"], "done": "requested",
            "requested": f"{body['owner']}:{body['snapshot_type']}:{body['period']}"}))
    message = reply.body.get("message") if isinstance(reply.body, dict) else None
    field_name = reply.body.get("field") if isinstance(reply.body, dict) else None
    # The field a refusal names marks the form's input; the message says what to do.
    text = f"Refused: {message or 'the request was refused'}" + (
        f" ({field_name})" if field_name and field_name != "mode" else "")  # the kind is no typed field
    typed = {"row": f"{body['owner']}:{body['snapshot_type']}:{body['period']}",
             "reason": ctx.fields.get("reason", "")[:500], "field": field_name or "",
             "general": ctx.fields.get("form") == "general", "type": f"{body['owner']}:{body['snapshot_type']}",
             "period": body["period"][:7], "mode": body["mode"]}
    return periods_page(ctx, workspace=body["workspace_id"], problem=text, typed=typed,
                        status_code=reply.status if 400 <= reply.status < 500 else 502)


def form_key(ctx: Request) -> dict[str, str] | None:
    """The ``Idempotency-Key`` header of a staff request form's ``key`` field (a random key
    made when the form was rendered), or None when the form carries none."""
    key = ctx.fields.get("key", "").strip()
    return {"Idempotency-Key": key[:200]} if key else None


def _period_request_answer(ctx: Request, body: dict[str, str], reply: Any) -> Response:
    """A request made on a period's page: the period's page again, with ``done`` (303) or
    the refusal on its form, the reason kept as typed."""
    page = f"{PREFIX}/snapshots/periods/" + "/".join(
        quote(x, safe="") for x in (body["owner"], body["snapshot_type"], body["period"]))
    if reply.status in (200, 201):
        return ctx.redirect(page + "?" + urlencode({"workspace": body["workspace_id"], "done": "requested"}))
    answer = reply.body if isinstance(reply.body, dict) else {}
    problem = {"run_id": "", "action": "request", "message": answer.get("message") or "The request was refused.",
               "field": answer.get("field") or "", "reason": ctx.fields.get("reason", "")[:500]}
    return period_page(ctx, owner=body["owner"], snapshot_type=body["snapshot_type"], period=body["period"],
                       workspace=body["workspace_id"], problem=problem,
                       status_code=reply.status if 400 <= reply.status < 500 else 502)


def picker_page(ctx: Request, *, owner: str, snapshot_type: str, month: str, problem: str | None = None,
                status_code: int = 200) -> Response:
    """The reports a month's snapshot feeds: the workspace's reports (``GET /reports``,
    one page of up to 200) whose current version has a section reading ``owner``'s
    ``snapshot_type`` (the report's ``snapshot_sources``), each with a form that renders
    it over ``month`` (``YYYY-MM``); ``problem`` is a refusal to show."""
    client = ctx.api()
    reply = client.call("GET", "/reports", query={"limit": "200"})
    if reply.status != 200:
        return ctx.api_error(reply)
    reports = []
    for item in reply.body["items"]:
        detail = client.call("GET", f"/reports/{item['id']}")
        if detail.status != 200:
            continue  # deleted meanwhile, or refused: not one the person may render
        sources = detail.body.get("snapshot_sources") or []
        if any(s and s["owner"] == owner and s["snapshot_type"] == snapshot_type for s in sources):
            reports.append({**item, "title": detail.body["definition"]["title"],
                            "sections": sum(1 for s in sources if s)})
    return ctx.page("period_picker.html", status_code, owner=owner, snapshot_type=snapshot_type,
                    month=month, reports=reports, problem=problem, more=bool(reply.body.get("next_cursor")),
                    render_key=str(uuid.uuid4()))


@router.get(f"{PREFIX}/snapshots/reports")
@signed_in
def period_picker(ctx: Request) -> Response:
    """``GET /console/snapshots/reports``: the period picker (:func:`picker_page`); a ``month``
    that is no month is a 422 page."""
    params = ctx.params
    if not MONTH_TEXT.fullmatch(params.get("month", "")):
        return ctx.page("error.html", HTTPStatus.UNPROCESSABLE_ENTITY, title="Refused",
                        message="The month must be a month YYYY-MM (month).", back=way_back("/snapshots"))
    return picker_page(ctx, owner=params.get("owner", "")[:100], month=params.get("month", "")[:20],
                       snapshot_type=params.get("snapshot_type", "")[:100])


@router.post(f"{PREFIX}/snapshots/renders")
@checked_post
def period_render(ctx: Request) -> Response:
    """Render the chosen report over the month (``POST /reports/{id}/renders`` with
    ``{"month"}`` and the form's Idempotency-Key: a repeated click is the same render),
    then its page; a refusal is shown on the picker with the API's reason."""
    report_id, month = ctx.fields.get("report_id", "").strip(), ctx.fields.get("month", "").strip()
    headers = {"Idempotency-Key": ctx.fields["key"][:200]} if ctx.fields.get("key") else None
    reply = ctx.api().call("POST", f"/reports/{quote(report_id, safe='')}/renders", body={"month": month},
                           headers=headers)
    if reply.status == 202 and isinstance(reply.body, dict):
        return ctx.redirect(f"{PREFIX}/reports/{quote(report_id, safe='')}/renders/"
                            f"{quote(str(reply.body['id']), safe='')}")
    body = reply.body if isinstance(reply.body, dict) else {}
    text = f"Refused: {body.get('message') or 'the render was refused'}" + (
        f" ({body['field']})" if body.get("field") else "")
    return picker_page(ctx, owner=ctx.fields.get("owner", "")[:100], month=month[:20], problem=text,
                       snapshot_type=ctx.fields.get("snapshot_type", "")[:100],
                       status_code=reply.status if 400 <= reply.status < 500 else 502)


#: The render states that are not finished: the render's page keeps its status live.
RENDER_UNDER_WAY = ("requested", "rendering")


def render_view(ctx: Request, report_id: str, render_id: str) -> tuple[dict[str, Any] | None, Response | None]:
    """What a render's status shows (``GET /reports/{id}/renders/{render_id}``): ``(values,
    None)`` with the render, its zone, its instants and ``live`` (not finished yet), or
    ``(None, the API's refusal as a page)``."""
    reply = ctx.api().call("GET", f"/reports/{quote(report_id, safe='')}/renders/{quote(render_id, safe='')}")
    if reply.status != 200:
        return None, ctx.api_error(reply)
    render = reply.body
    zone = zone_of(render)
    return {"render": render, "zone": zone, "report_id": report_id, "live": render["state"] in RENDER_UNDER_WAY,
            "requested": when(render["requested_at"], zone), "finished": when(render.get("finished_at"), zone),
            "expires": when(render.get("download_expires_at"), zone),
            "expired_on": when(render.get("expired_at"), zone) if render.get("expired") else None,
            "render_key": str(uuid.uuid4())}, None


@router.get(f"{PREFIX}/reports/<report_id>/renders/<render_id>")
@signed_in
def render_page(ctx: Request, report_id: str, render_id: str) -> Response:
    """A render: its state, the picked month, per snapshot section the version it showed
    (type, month, version, publication time, choice) and, once it succeeded, its
    download link (valid 60 s: the page is reloaded for a new one). While it renders, its
    status is fetched again from :func:`render_live`."""
    view, refused = render_view(ctx, report_id, render_id)
    if view is None:
        return refused  # type: ignore[return-value]
    render, zone = view["render"], view["zone"]
    report = ctx.api().call("GET", f"/reports/{quote(report_id, safe='')}")
    name = report.body.get("name") if report.status == 200 and isinstance(report.body, dict) else None
    basis = [None if b is None else {**b, "published": when(b["published_at"], zone)}
             for b in render.get("snapshot_basis") or []]
    source = next((b for b in render.get("snapshot_basis") or [] if b), None)
    picker = (f"{ctx.public}/snapshots/reports?" + urlencode({"owner": source["owner"], "month": render["month"],
                                                              "snapshot_type": source["snapshot_type"]})
              if source and render.get("month") else None)
    return ctx.page("render.html", name=name, basis=basis, picker=picker, **view)


@router.get(f"{PREFIX}/reports/<report_id>/renders/<render_id>/live")
@signed_in
def render_live(ctx: Request, report_id: str, render_id: str) -> Response:
    """``GET /console/reports/{id}/renders/{render_id}/live``: the render's status block
    alone (an HTML fragment console.js swaps in until the render is finished). Another
    workspace's render is a 404."""
    view, refused = render_view(ctx, report_id, render_id)
    if view is None:
        return refused  # type: ignore[return-value]
    return ctx.page("_render_status.html", unread=0, **view)
