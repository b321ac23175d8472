import argparse
import base64
import io
import logging
import os
import textwrap

import pytest

from vpncrypt.config import load_config
from vpncrypt.cli.up import add_logging_arguments
from vpncrypt.daemon.logsetup import redact, setup_logging, stderr_is_journal
from vpncrypt.daemon.uapi import handle_request
from tests.daemon.fakes import FakeControl

KEYS = [os.urandom(32) for _ in range(4)]


@pytest.fixture
def capture():
    buf = io.StringIO()
    handler = setup_logging("debug", stream=buf, journal=False)
    try:
        yield buf
    finally:
        logging.getLogger().removeHandler(handler)
        logging.getLogger().setLevel(logging.WARNING)


def _forms(key):
    return [base64.b64encode(key).decode(), key.hex(), key.hex().upper(), repr(key)[2:-1]]


def test_no_key_material_in_debug_logs(capture, tmp_path):
    priv, pub, psk, pub2 = KEYS

    def b(k):
        return base64.b64encode(k).decode()

    path = tmp_path / "wg0.conf"
    path.write_text(
        textwrap.dedent(f"""\
        [Interface]
        PrivateKey = {b(priv)}
        ListenPort = 51820
        [Peer]
        PublicKey = {b(pub)}
        PresharedKey = {b(psk)}
        AllowedIPs = 10.0.0.2/32
        """)
    )
    os.chmod(path, 0o600)
    log = logging.getLogger("vpncrypt.test")
    cfg = load_config(str(path))
    log.debug("loaded %s", cfg)
    log.debug("interface %r peers %r", cfg.interface, cfg.peers)
    log.debug(
        "private %s psk %r pub %s",
        cfg.interface.private_key,
        cfg.peers[0].preshared_key,
        cfg.peers[0].public_key,
    )
    log.debug(f"f-string {cfg.interface.private_key} {cfg.peers[0].public_key}")
    # mistakes the redaction must catch
    log.debug("oops %s", b(priv))
    log.info("oops hex %s", psk.hex())
    log.warning("two in a row %s%s", b(pub2), priv.hex())
    try:
        raise ValueError(f"bad {b(psk)}")
    except ValueError:
        log.exception("with traceback")
    # UAPI requests, good and malformed, carrying hex keys
    c = FakeControl()
    handle_request("set=1", f"private_key={priv.hex()}\npublic_key={pub2.hex()}\n", c)
    handle_request("set=1", f"private_key={priv.hex()}\n{psk.hex()}=1\n", c)
    out = capture.getvalue()
    assert "loaded" in out and "PublicKey(" in out and "<redacted>" in out
    assert "10.0.0.2/32" in out  # the rest of the message survives
    for key in KEYS:
        for form in _forms(key):
            assert form not in out, form


def test_redact_keeps_ordinary_text():
    text = "peer AbCdEfGh… 10.0.0.1/24 sha256 deadbeef listen_port=51820"
    assert redact(text) == text
    k = base64.b64encode(os.urandom(32)).decode()
    assert redact(f"x={k}.") == "x=<redacted>."


def test_plain_and_journal_formats():
    buf = io.StringIO()
    h = setup_logging("info", stream=buf, journal=False)
    try:
        logging.getLogger("vpncrypt.x").debug("hidden")
        logging.getLogger("vpncrypt.x").warning("shown")
        assert "hidden" not in buf.getvalue()
        line = buf.getvalue().strip()
        assert line.endswith("WARNING vpncrypt.x: shown") and not line.startswith("<")
        buf2 = io.StringIO()
        h = setup_logging("debug", stream=buf2, journal=True)  # replaces the first handler
        log = logging.getLogger("vpncrypt.y")
        log.debug("d")
        log.info("i")
        log.warning("w")
        log.error("e1\ne2")
        log.critical("c")
        assert buf2.getvalue().splitlines() == [
            "<7>vpncrypt.y: d",
            "<6>vpncrypt.y: i",
            "<4>vpncrypt.y: w",
            "<3>vpncrypt.y: e1",
            "<3>e2",
            "<2>vpncrypt.y: c",
        ]
        assert "<7>" not in buf.getvalue()
    finally:
        logging.getLogger().removeHandler(h)
        logging.getLogger().setLevel(logging.WARNING)


def test_journal_detection(tmp_path):
    f = open(tmp_path / "stream", "w")
    with f:
        st = os.fstat(f.fileno())
        assert stderr_is_journal(f, {"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"})
        assert not stderr_is_journal(f, {"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino + 1}"})
        assert not stderr_is_journal(f, {})
        assert not stderr_is_journal(f, {"JOURNAL_STREAM": "junk"})


def test_log_level_argument(monkeypatch):
    p = argparse.ArgumentParser()
    add_logging_arguments(p)
    assert p.parse_args([]).log_level == "info"
    assert p.parse_args(["--log-level", "debug"]).log_level == "debug"
    with pytest.raises(SystemExit):
        p.parse_args(["--log-level", "loud"])
    monkeypatch.setenv("VPNCRYPT_LOG_LEVEL", "WARNING")
    p = argparse.ArgumentParser()
    add_logging_arguments(p)
    assert p.parse_args([]).log_level == "warning"
    with pytest.raises(ValueError):
        setup_logging("loud", stream=io.StringIO())
