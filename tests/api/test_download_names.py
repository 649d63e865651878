"""The file name a download offers is built from a safe ASCII slug, with the readable name
in an RFC 6266 ``filename*`` (RFC 5987 UTF-8 encoding): a schedule's name never reaches the
``Content-Disposition`` header raw (no path, no quote, no CR/LF, no non-ASCII byte)."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, unquote, urlsplit

import pytest

from tests.api.test_delivery_routes import aws, body, deliver_run, olga, tenants  # noqa: F401 - fixtures and helpers
from timekeeper.api.app import ApiAdapters, create_app
from timekeeper.db.connection import connect
from timekeeper.edge import registries
from timekeeper.reporting.links import LinkSigner

KEY = "s" * 48
HOSTILE = ["../../../../etc/passwd", "Überfällige Rechnungen € 2027", 'a "quoted"\r\nSet-Cookie: x=1', "日報",
           "...", "a\\b/c\x00d\x7f"]


@pytest.fixture
def app(api_conn, publisher, clock_now, aws):  # noqa: F811 - the delivery routes' adapters
    s3, _ = aws
    return create_app(ApiAdapters(connection=lambda: api_conn, publisher_for=lambda _: publisher,
                                  registry=registries.work_kinds, now=lambda: clock_now["now"],
                                  files=lambda: (s3, "files"), links=lambda: LinkSigner(KEY)))


def _check_disposition(value: str, *, run_id: str, readable: str) -> None:
    # An ASCII header value without control characters
    assert value.isascii() and not re.search(r"[\x00-\x1f\x7f]", value), value
    match = re.fullmatch(r'attachment; filename="([A-Za-z0-9._-]+)"; filename\*=UTF-8\'\'([A-Za-z0-9!#$&+.^_`|~%-]+)',
                         value)
    assert match, value
    fallback, encoded = match.groups()
    # The fallback is a slug ending in the run id and the format, that no client reads as a path
    assert fallback.endswith(f"-{run_id}.csv") and not fallback.startswith(".") and ".." not in fallback
    # The readable name keeps the schedule's words, without path separators or control characters
    decoded = unquote(encoded, encoding="utf-8", errors="strict")
    assert decoded.endswith(f"-{run_id}.csv")
    assert "/" not in decoded and "\\" not in decoded and not re.search(r"[\x00-\x1f\x7f]", decoded)
    assert decoded.startswith(readable), (decoded, readable)


@pytest.mark.parametrize("name", HOSTILE)
def test_a_delivery_download_names_its_file_by_a_slug_and_an_encoded_readable_name(
        call, tenants, publisher, aws, db_url, name):  # noqa: F811
    s3, ses = aws
    created = call("POST", "/query-schedules", body(tenants, recipients=["rita"]), as_=olga(tenants))
    schedule_id = created.body["id"]
    # Given a schedule whose name is hostile (set in the database, whatever the API accepts)
    with connect(db_url) as conn:
        conn.execute("UPDATE schedules SET name = %s WHERE id = %s", (name.replace("\x00", ""), schedule_id))
    publisher.sent.clear()
    call("POST", f"/query-schedules/{schedule_id}/run", as_=olga(tenants))
    (message,) = publisher.sent
    sent = deliver_run(db_url, message, s3, ses)
    token = re.search(r"https://api\.test/downloads/([^'\"]+)", sent[0]["html"]).group(1)
    # When the recipient's link is followed
    got = call("GET", f"/downloads/{token}", claims=None)
    # Then the presigned URL asks S3 for a Content-Disposition built from a safe name
    assert got.status == 302, got.body
    (value,) = parse_qs(urlsplit(got.headers["location"]).query)["response-content-disposition"]
    readable = re.sub(r"[\x00-\x1f\x7f/\\]+", "-", name.replace("\x00", "")).strip(" .-")
    _check_disposition(value, run_id=str(message.run_id), readable=readable[:20] if readable else "delivery")


@pytest.mark.parametrize("name", HOSTILE + ["", "   ", "x" * 500])
def test_the_file_name_function_gives_an_ascii_header_for_any_name(name):
    from timekeeper.api.downloads import attachment

    value = attachment(name, suffix="-0a1b.csv", default="delivery")
    assert value.isascii() and "\r" not in value and "\n" not in value and len(value) < 1000
    assert re.fullmatch(r'attachment; filename="[A-Za-z0-9._-]+"; filename\*=UTF-8\'\'[A-Za-z0-9!#$&+.^_`|~%-]+',
                        value), value


@pytest.mark.parametrize("name", HOSTILE)
def test_the_local_s3_serves_a_download_under_any_schedule_name_at_once(name):
    # (A non-ASCII name in the header once made the local download hang, CR/LF a 500.)
    import boto3
    import requests
    from botocore.config import Config
    from moto.server import ThreadedMotoServer

    from timekeeper.api.downloads import attachment

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        s3 = boto3.client("s3", endpoint_url=f"http://{host}:{port}", region_name="us-east-1",
                          aws_access_key_id="t", aws_secret_access_key="t", config=Config(signature_version="s3v4"))
        s3.create_bucket(Bucket="files-bucket")
        s3.put_object(Bucket="files-bucket", Key="run.csv", Body=b"a,b\n")
        url = s3.generate_presigned_url("get_object", ExpiresIn=60, Params={
            "Bucket": "files-bucket", "Key": "run.csv",
            "ResponseContentDisposition": attachment(name, suffix="-1.csv", default="delivery")})
        reply = requests.get(url, timeout=60)
    finally:
        server.stop()
    assert reply.status_code == 200 and reply.content == b"a,b\n"
    assert reply.headers["Content-Disposition"].startswith("attachment; filename=")
