"""The debug trace's lines for what crosses the socket say what is known
when they are made: a datagram is classified by its type and size alone,
before any tag is checked, so a 32-byte transport message (the size of a
keepalive: 16-byte header, empty payload, 16-byte tag) is not called a
keepalive; anybody can send one (the outside review saw forged ones traced
as "received keepalive")."""

from vpncrypt.daemon.trace import EventTrace
from vpncrypt.protocol import events as E
from vpncrypt.protocol.messages import classify

FORGED = b"\x04\0\0\0" + bytes(28)  # type 4, receiver 0, counter 0, a zero "tag"


def test_a_keepalive_sized_message_is_not_called_a_keepalive():
    kind = classify(FORGED)
    line = EventTrace().line(E.MessageReceived(kind, len(FORGED), ("192.0.2.7", 4000)))
    assert line == "received a keepalive-sized transport message from 192.0.2.7:4000 (not yet authenticated)"


def test_handshake_and_malformed_lines_are_unchanged():
    trace = EventTrace()
    init = b"\x01\0\0\0" + bytes(144)
    assert (
        trace.line(E.MessageReceived(classify(init), 148, ("192.0.2.7", 4000)))
        == "received handshake initiation from 192.0.2.7:4000"
    )
    short = FORGED[:31]
    assert (
        trace.line(E.MessageReceived(classify(short), 31, ("192.0.2.7", 4000)))
        == "received a malformed datagram (31 bytes) from 192.0.2.7:4000"
    )
