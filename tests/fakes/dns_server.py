"""A real DNS server on a loopback UDP port, answering from a table (dnspython's messages).

The resolver under test speaks real DNS to it over UDP: its queries are parsed with
`dns.message.from_wire`, its answers built with `dns.message.make_response` and
`dns.rrset.from_text`. A name in the table answers NOERROR (with the records of the
asked type, or none); any other name answers NXDOMAIN. `silent` drops every query, as a
DNS server that does not answer.
"""

from __future__ import annotations

import socket
import threading
from types import TracebackType

import dns.message
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rrset

from panager.providers.caldav.discovery import DnsSettings


class DnsServer:
    def __init__(self, records: dict[tuple[str, str], list[str]] | None = None) -> None:
        # (name, type) -> record texts, e.g. ("_caldavs._tcp.example.org", "SRV"):
        # ["0 1 443 caldav.example.org."]
        self.records = dict(records or {})
        self.silent = False
        self.queries: list[tuple[str, str]] = []
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._socket.bind(("127.0.0.1", 0))
        self._socket.settimeout(5)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="dns-server", daemon=True)

    @property
    def port(self) -> int:
        return int(self._socket.getsockname()[1])

    def settings(self, lifetime: float = 2.0) -> DnsSettings:
        return DnsSettings(nameservers=("127.0.0.1",), port=self.port, lifetime=lifetime)

    def __enter__(self) -> DnsServer:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self._stop.set()
        self._socket.sendto(b"", ("127.0.0.1", self.port))  # wake the thread at once
        self._thread.join(5)
        self._socket.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                data, peer = self._socket.recvfrom(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            if self._stop.is_set():
                return
            reply = self._answer(data)
            if reply is not None:
                self._socket.sendto(reply, peer)

    def _answer(self, data: bytes) -> bytes | None:
        query = dns.message.from_wire(data)
        question = query.question[0]
        name = question.name.to_text().rstrip(".").lower()
        kind = dns.rdatatype.to_text(question.rdtype)
        self.queries.append((name, kind))
        if self.silent:
            return None
        response = dns.message.make_response(query)
        texts = self.records.get((name, kind))
        if texts:
            response.answer.append(dns.rrset.from_text(
                question.name, 60, dns.rdataclass.IN, question.rdtype, *texts))
        elif not any(known == name for known, _ in self.records):
            response.set_rcode(dns.rcode.NXDOMAIN)
        return response.to_wire()
