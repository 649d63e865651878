"""A TCP proxy between the product and its database server that cuts connections on demand.

Fault campaigns put it in front of the server so connections can be cut at any moment,
not only at the product's crash points: in the middle of a statement, between the
statements of a transaction, during a COMMIT (whose outcome the client then does not
know), or while a pooled connection sits idle. :meth:`CuttingProxy.cut` shuts both sides
of one proxied connection down: the product's driver meets a closed socket at its next
read or write, and the server sees its client go away and rolls back what was open, as
after a network partition or a load balancer's reset.

It forwards bytes and nothing else (no protocol awareness), so it works in front of
PostgreSQL on a Unix socket or TCP and in front of a pooler.
"""

from __future__ import annotations

import itertools
import socket
import threading
from dataclasses import dataclass, field
from typing import Any

#: Bytes read per ``recv`` of a pump.
_CHUNK = 65536


@dataclass
class _Link:
    """One proxied connection: the product's side and the server's."""

    client: socket.socket
    server: socket.socket
    closed: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def close(self) -> bool:
        """Shut both sides down and close them; True when this call closed the link."""
        with self.lock:
            if self.closed:
                return False
            self.closed = True
        for sock in (self.client, self.server):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # the peer went first
            sock.close()
        return True


def upstream_of(conninfo: str) -> tuple[int, Any]:
    """The socket family and address a libpq connection string connects to:
    ``(AF_UNIX, "<dir>/.s.PGSQL.<port>")`` for a socket directory host, else
    ``(AF_INET, (host, port))``. Raises ``ValueError`` for a string with several hosts."""
    import psycopg

    info = psycopg.conninfo.conninfo_to_dict(conninfo)
    host = str(info.get("host") or "/tmp")
    port = int(info.get("port") or 5432)
    if "," in host:
        raise ValueError("a connection string with several hosts cannot be proxied")
    if host.startswith("/"):
        return socket.AF_UNIX, f"{host}/.s.PGSQL.{port}"
    return socket.AF_INET, (str(info.get("hostaddr") or host), port)


def through(conninfo: str, port: int) -> str:
    """``conninfo`` connecting to the proxy on ``127.0.0.1:port`` instead of its server
    (every other parameter as it was)."""
    import psycopg

    info = psycopg.conninfo.conninfo_to_dict(conninfo)
    info.pop("hostaddr", None)
    info.update(host="127.0.0.1", port=str(port))
    return psycopg.conninfo.make_conninfo(**info)


class CuttingProxy:
    """Listens on ``127.0.0.1`` (:attr:`port`, picked by the system) and connects each
    accepted connection to ``upstream`` (``(family, address)``, :func:`upstream_of`),
    pumping bytes both ways on two daemon threads per connection. A connection the
    server refuses is closed at once (the client sees the refusal as a closed socket).

    :meth:`live` names the open connections, :meth:`cut` closes one; :meth:`close` stops
    listening and closes every connection. Safe to call from any thread."""

    def __init__(self, upstream: tuple[int, Any]) -> None:
        self.upstream = upstream
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._links: dict[int, _Link] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._stopped = False
        #: Connections accepted and connections cut, since the start.
        self.accepted = 0
        self.cuts = 0
        self._thread = threading.Thread(target=self._accept, name="timekeeper-cut-proxy", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            family, address = self.upstream
            server = socket.socket(family, socket.SOCK_STREAM)
            try:
                server.connect(address)
            except OSError:
                server.close()
                client.close()
                continue
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if family == socket.AF_INET:
                server.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            link = _Link(client, server)
            with self._lock:
                if self._stopped:
                    link.close()
                    return
                link_id = next(self._ids)
                self._links[link_id] = link
                self.accepted += 1
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(link_id, link, source, sink), daemon=True,
                                 name=f"timekeeper-cut-proxy-{link_id}").start()

    def _pump(self, link_id: int, link: _Link, source: socket.socket, sink: socket.socket) -> None:
        try:
            while True:
                data = source.recv(_CHUNK)
                if not data:
                    break
                sink.sendall(data)
        except OSError:
            pass  # cut, or the peer reset it
        finally:
            link.close()
            with self._lock:
                self._links.pop(link_id, None)

    def live(self) -> list[int]:
        """The ids of the open connections, ascending."""
        with self._lock:
            return sorted(i for i, link in self._links.items() if not link.closed)

    def cut(self, link_id: int) -> bool:
        """Cut connection ``link_id`` (both sides shut down and closed); True when it was
        open and this call cut it."""
        with self._lock:
            link = self._links.get(link_id)
        if link is None or not link.close():
            return False
        with self._lock:
            self.cuts += 1
        return True

    def close(self) -> None:
        """Stop accepting and close every connection (idempotent)."""
        with self._lock:
            self._stopped = True
            links = list(self._links.values())
        try:
            self._listener.close()
        except OSError:
            pass
        for link in links:
            link.close()
