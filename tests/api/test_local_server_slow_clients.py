"""``serve``'s HTTP layer against real sockets: slow and silent clients never hold up the
others (a deadline per request phase, not per received byte), and a request whose
``Content-Length`` is not a length or whose body ends early is the JSON ``bad_request``."""

from __future__ import annotations

import socket
import threading
import time
import uuid
from urllib.parse import urlsplit

import pytest
import requests

from tests.api.conftest import enrol, serving
from timekeeper.local import serve

WORKSPACE = uuid.uuid4()
AUTH = {"Authorization": f"Bearer dev:alice:{WORKSPACE}:schedules:read,schedules:write"}
#: How many slow clients each test holds open (as many as the old pool had workers).
SLOW_CLIENTS = 8
#: serve's deadlines for the request line and headers, and for the body (seconds).
HEADER_READ_TIMEOUT_S = serve.HEADER_READ_TIMEOUT_S
BODY_READ_TIMEOUT_S = serve.BODY_READ_TIMEOUT_S
#: How long a normal request may take while they are open (seconds): half a phase's
#: deadline. A request held up behind them waits for that deadline (or forever); a busy
#: machine (a CI runner shared with other jobs) may take a few seconds to answer one.
PROMPT_S = min(HEADER_READ_TIMEOUT_S, BODY_READ_TIMEOUT_S) / 2
#: How late after a deadline the client may notice the server closed or answered
#: (seconds): a trickling client learns of the close on its second write after it (one a
#: second), and a busy machine schedules the server's and the client's threads late.
LATE_S = 10


@pytest.fixture(scope="module")
def local_server(db_url):
    enrol(db_url, "alice", WORKSPACE)  # a member of the workspace her token names
    with serving(db_url, poll_interval_s=0.5) as server:
        yield server


def _connect(server) -> socket.socket:
    address = urlsplit(server.base_url)
    return socket.create_connection((address.hostname, address.port), timeout=30)


def _normal_request_seconds(server) -> float:
    started = time.monotonic()
    reply = requests.get(f"{server.base_url}/schedules", headers=AUTH, timeout=60)
    assert reply.status_code == 200, reply.text
    return time.monotonic() - started


def _read_all(sock: socket.socket) -> bytes:
    out = b""
    while chunk := sock.recv(65536):
        out += chunk
    return out


def test_silent_connections_do_not_hold_up_a_normal_request(local_server):
    # Given clients that open connections and send nothing
    silent = [_connect(local_server) for _ in range(SLOW_CLIENTS)]
    try:
        time.sleep(0.3)  # (the server has accepted them all)
        # When another client calls the API
        # Then it is answered promptly
        assert _normal_request_seconds(local_server) < PROMPT_S
    finally:
        for sock in silent:
            sock.close()


def test_more_silent_connections_than_connection_threads_do_not_hold_up_a_normal_request(local_server):
    # Given more silent connections than the server has connection threads
    silent = [_connect(local_server) for _ in range(serve.CONNECTION_THREADS + 36)]
    try:
        time.sleep(0.5)  # (the server has accepted and parked them all)
        # When another client calls the API
        # Then it is answered promptly: a silent connection holds no thread
        assert _normal_request_seconds(local_server) < PROMPT_S
        # And a parked connection that speaks later is still answered
        late = silent.pop()
        late.sendall(f"GET /schedules HTTP/1.1\r\nHost: x\r\nAuthorization: {AUTH['Authorization']}\r\n"
                     "\r\n".encode())
        assert _read_all(late).startswith(b"HTTP/1.0 200")
        late.close()
    finally:
        for sock in silent:
            sock.close()


def _hello(environ, start_response):
    start_response("200 OK", [("Content-Length", "2")])
    return [b"ok"]


#: How long the small server parks a silent connection (seconds): long beside the steps of
#: the test that expect a connection still parked, even on a busy machine.
SMALL_WAIT_S = 5.0


@pytest.fixture
def small_parking_server():
    """A bare PooledWSGIServer (no API) that parks at most 3 silent connections for
    :data:`SMALL_WAIT_S`."""
    from wsgiref.simple_server import make_server

    def small(*args, **kwargs):
        return serve.PooledWSGIServer(*args, waiting=3, wait_s=SMALL_WAIT_S, **kwargs)

    httpd = make_server("127.0.0.1", 0, _hello, handler_class=serve._RequestHandler, server_class=small)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    yield httpd.server_address
    httpd.shutdown()
    thread.join(5)
    httpd.server_close()


def _closed_by_server(sock: socket.socket, within_s: float) -> bool:
    sock.settimeout(within_s)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def test_parked_connections_are_closed_oldest_first_past_the_limit_and_at_the_deadline(small_parking_server):
    host, port = small_parking_server[:2]
    # Given three silent connections parked (the limit)
    first, second, third = (socket.create_connection((host, port), timeout=5) for _ in range(3))
    time.sleep(0.3)
    # When a fourth arrives
    fourth = socket.create_connection((host, port), timeout=5)
    # Then the one parked longest is closed (at once: long before its wait has passed), the others stay
    assert _closed_by_server(first, SMALL_WAIT_S / 2)
    assert not _closed_by_server(second, 0.2)
    # And each silent one is closed once its wait has passed
    for sock in (second, third, fourth):
        assert _closed_by_server(sock, SMALL_WAIT_S + LATE_S)
        sock.close()
    first.close()
    # And a connection that speaks is answered
    with socket.create_connection((host, port), timeout=5) as talker:
        talker.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert _read_all(talker).endswith(b"ok")


def test_trickling_clients_do_not_hold_up_a_normal_request_and_are_cut_at_the_header_deadline(local_server):
    # Given clients that send their request line one byte every second (a per-read timeout
    # would never expire)
    stop = threading.Event()
    closed_after: list[float] = []
    opened = time.monotonic()

    def trickle() -> None:
        sock = _connect(local_server)
        try:
            for byte in b"GET /schedules HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 1000:
                if stop.is_set():
                    return
                sock.sendall(bytes([byte]))
                time.sleep(1.0)
        except OSError:
            closed_after.append(time.monotonic() - opened)  # the server closed the connection
        finally:
            sock.close()

    threads = [threading.Thread(target=trickle, daemon=True) for _ in range(SLOW_CLIENTS)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(1.5)
        # When another client calls the API meanwhile
        # Then it is answered promptly
        assert _normal_request_seconds(local_server) < PROMPT_S
        # And every trickling client is dropped once the header deadline has passed
        for thread in threads:
            thread.join(HEADER_READ_TIMEOUT_S + LATE_S + 5)
        assert len(closed_after) == SLOW_CLIENTS
        assert all(HEADER_READ_TIMEOUT_S - 1 <= t <= HEADER_READ_TIMEOUT_S + LATE_S for t in closed_after), closed_after
    finally:
        stop.set()


@pytest.mark.parametrize("length", ["abc", "1.5", "9" * 20, "-1", "1e3", " 12x"])
def test_a_content_length_that_is_no_length_is_the_json_bad_request(local_server, length, capsys):
    # Given a POST whose Content-Length is not a decimal byte count the server can read
    sock = _connect(local_server)
    try:
        sock.sendall(f"POST /schedules HTTP/1.1\r\nHost: x\r\nAuthorization: {AUTH['Authorization']}\r\n"
                     f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n{{}}".encode())
        started = time.monotonic()
        # When the server answers
        answer = _read_all(sock)
    finally:
        sock.close()
    # Then it is a prompt 400 or 413 with the API's error body, and no traceback is logged
    head, _, body = answer.partition(b"\r\n\r\n")
    status = int(head.split()[1])
    assert status in (400, 413), answer
    assert b"Content-Type: application/json" in head
    assert b'"code":"bad_request"' in body
    assert time.monotonic() - started < PROMPT_S
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize("framing", ["Transfer-Encoding: chunked\r\nContent-Length: 5",
                                     "Transfer-Encoding: chunked"])
def test_a_transfer_encoded_body_is_the_json_bad_request(local_server, framing):
    # Given a POST framed by Transfer-Encoding (with or without a Content-Length beside it)
    sock = _connect(local_server)
    try:
        sock.sendall(f"POST /schedules HTTP/1.1\r\nHost: x\r\nAuthorization: {AUTH['Authorization']}\r\n"
                     f"Content-Type: application/json\r\n{framing}\r\n\r\n0\r\n\r\n".encode())
        # When the server answers
        answer = _read_all(sock)
    finally:
        sock.close()
    # Then it is a 400 with the API's error body, not a guess at where the body ends
    head, _, body = answer.partition(b"\r\n\r\n")
    assert int(head.split()[1]) == 400, answer
    assert b'"code":"bad_request"' in body and b"transfer-encoding" in body


def test_a_body_that_ends_before_its_content_length_is_a_prompt_bad_request(local_server):
    # Given a POST announcing 100 bytes that sends 10 and then closes its side
    sock = _connect(local_server)
    try:
        sock.sendall(f"POST /schedules HTTP/1.1\r\nHost: x\r\nAuthorization: {AUTH['Authorization']}\r\n"
                     "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"name\": 1".encode())
        sock.shutdown(socket.SHUT_WR)
        started = time.monotonic()
        answer = _read_all(sock)
    finally:
        sock.close()
    # Then the answer is the JSON bad_request at once
    assert answer.startswith(b"HTTP/1.0 400") or answer.startswith(b"HTTP/1.1 400"), answer
    assert b'"code":"bad_request"' in answer
    assert time.monotonic() - started < PROMPT_S


def test_a_body_that_stalls_before_its_content_length_is_a_bad_request_at_the_body_deadline(local_server):
    # Given a POST announcing 100 bytes that sends 10 and then a byte every second
    sock = _connect(local_server)
    answer = b""
    try:
        sock.sendall(f"POST /schedules HTTP/1.1\r\nHost: x\r\nAuthorization: {AUTH['Authorization']}\r\n"
                     "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"name\": 1".encode())
        started = time.monotonic()
        sock.settimeout(1.0)
        while time.monotonic() - started < BODY_READ_TIMEOUT_S + LATE_S + 5:
            try:
                sock.sendall(b" ")
            except OSError:
                pass
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                continue
            if not chunk:
                break
            answer += chunk
        elapsed = time.monotonic() - started
    finally:
        sock.close()
    # Then the server answers the JSON bad_request once the body deadline has passed
    assert b" 400 " in answer.split(b"\r\n", 1)[0], answer
    assert b'"code":"bad_request"' in answer
    assert BODY_READ_TIMEOUT_S - 1 <= elapsed <= BODY_READ_TIMEOUT_S + LATE_S
