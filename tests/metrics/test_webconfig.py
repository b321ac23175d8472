"""The exporter web config file (vpncrypt/daemon/webconfig.py) and the
--metrics* settings (vpncrypt/cli/up.py): what is taken, what is refused
(one line naming the file), and basic auth's verdicts."""

import base64
import os

import bcrypt
import pytest

from tests.metrics.webtls import certificates
from vpncrypt.cli.up import metrics_settings
from vpncrypt.daemon.webconfig import WebConfigError, load_web_config

HASH = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(4)).decode()


def _write(tmp_path, text, mode=0o600, name="web.yml"):
    path = tmp_path / name
    path.write_text(text)
    os.chmod(path, mode)
    return str(path)


def _auth(user, password):
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_basic_auth_verdicts(tmp_path):
    web = load_web_config(_write(tmp_path, f"basic_auth_users:\n  alice: {HASH}\n"))
    assert web.tls is None and set(web.users) == {"alice"}
    assert web.authorized(_auth("alice", "s3cret"))
    assert web.authorized("basic " + _auth("alice", "s3cret")[6:])  # the scheme in any case
    for header in (
        None,
        "",
        _auth("alice", "wrong"),
        _auth("alice", ""),
        _auth("bob", "s3cret"),  # an unknown user with alice's password
        "Bearer abc",
        "Basic !!!not-base64",
        "Basic " + base64.b64encode(b"no colon").decode(),
        "Basic " + base64.b64encode(b"\xff\xfe:x").decode(),
    ):
        assert not web.authorized(header), header


def test_no_users_no_authentication(tmp_path):
    web = load_web_config(_write(tmp_path, "", mode=0o644))  # an empty file: nothing asked
    assert web.users is None and web.authorized(None)


@pytest.mark.parametrize(
    "text, message",
    [
        ("basic_auth_users: [alice]\n", "basic_auth_users must be a mapping of keys to values"),
        ("basic_auth_users:\n  alice: hunter2\n", "basic_auth_users.alice: not a bcrypt hash"),
        ("tls_server_config:\n  cert_file: a.pem\n", "tls_server_config: needs both cert_file and key_file"),
        ("tls_server_config:\n  cert: PEM\n", "tls_server_config.cert: not supported by vpncrypt; remove it"),
        (
            "tls_server_config:\n  cipher_suites: [TLS_AES_128_GCM_SHA256]\n",
            "tls_server_config.cipher_suites: not supported by vpncrypt; remove it",
        ),
        ("tls_server_config:\n  certfile: a.pem\n", "tls_server_config.certfile: unknown key"),
        ("http_server_config:\n  http3: true\n", "http_server_config.http3: unknown key"),
        ("http_server_config:\n  http2: yes please\n", "http_server_config.http2: expected true or false"),
        (
            "http_server_config:\n  headers:\n    X-Evil: 1\n",
            "http_server_config.headers.X-Evil: unknown header",
        ),
        ("- a list\n", "the file must be a mapping of keys to values"),
    ],
)
def test_refused_in_one_line_naming_the_file(tmp_path, text, message):
    path = _write(tmp_path, text)
    with pytest.raises(WebConfigError) as e:
        load_web_config(path)
    assert str(e.value).startswith(f"{path}: {message}"), str(e.value)
    assert "\n" not in str(e.value) and "hunter2" not in str(e.value)


def test_bad_yaml_names_its_line(tmp_path):
    path = _write(tmp_path, "basic_auth_users:\n  alice: [unclosed\n")
    with pytest.raises(WebConfigError, match=rf"^{path}:3: not valid YAML"):
        load_web_config(path)


def test_missing_file(tmp_path):
    with pytest.raises(WebConfigError, match=r"nope.yml: cannot read: No such file or directory$"):
        load_web_config(str(tmp_path / "nope.yml"))


def test_secrets_readable_by_others_refused(tmp_path):
    path = _write(tmp_path, f"basic_auth_users:\n  alice: {HASH}\n", mode=0o640)
    with pytest.raises(WebConfigError, match=r"holds password hashes \(basic_auth_users\) but is accessible"):
        load_web_config(path)
    ca, cert, key = certificates(str(tmp_path))
    os.chmod(key, 0o644)
    path = _write(tmp_path, f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n", name="tls.yml")
    with pytest.raises(WebConfigError, match=r"tls_server_config.key_file: .*holds a TLS private key but"):
        load_web_config(path)
    os.chmod(key, 0o600)
    assert load_web_config(path).tls is not None


def test_tls_options(tmp_path):
    ca, cert, key = certificates(str(tmp_path))
    base = f"tls_server_config:\n  cert_file: {os.path.basename(cert)}\n  key_file: {os.path.basename(key)}\n"
    # relative file names are the web config's folder's
    web = load_web_config(_write(tmp_path, base + "  min_version: TLS13\n"))
    import ssl

    assert web.tls.minimum_version == ssl.TLSVersion.TLSv1_3 and web.tls.verify_mode == ssl.CERT_NONE
    web = load_web_config(
        _write(tmp_path, base + f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {ca}\n")
    )
    assert web.tls.verify_mode == ssl.CERT_REQUIRED
    for extra, message in (
        ("  client_auth_type: RequireAndVerifyClientCert\n", "needs client_ca_file"),
        ("  client_auth_type: RequireAnyClientCert\n", "'RequireAnyClientCert' is not supported"),
        ("  min_version: SSL3\n", "'SSL3' is not one of TLS10, TLS11, TLS12, TLS13"),
    ):
        with pytest.raises(WebConfigError, match=message):
            load_web_config(_write(tmp_path, base + extra))
    with open(cert, "w") as f:
        f.write("not a certificate\n")
    with pytest.raises(WebConfigError, match="cannot load the certificates"):
        load_web_config(_write(tmp_path, base))


def test_headers_added(tmp_path):
    web = load_web_config(
        _write(
            tmp_path, "http_server_config:\n  headers:\n    X-Frame-Options: deny\n    X-XSS-Protection: ''\n"
        )
    )
    assert web.headers == (("X-Frame-Options", "deny"),)


# ---------------------------------------------------------------- the --metrics* settings


def test_unix_socket_settings(monkeypatch):
    for name in list(os.environ):
        if name.startswith("VPNCRYPT_METRICS"):
            monkeypatch.delenv(name)
    s = metrics_settings("unix:/run/vpncrypt/wg0-metrics.sock")
    assert (s.unix_path, s.socket_mode, s.socket_gid, s.endpoints) == (
        "/run/vpncrypt/wg0-metrics.sock",
        0o600,
        None,
        False,
    )
    s = metrics_settings("unix:/run/m.sock", socket_group="nogroup")
    assert (s.socket_mode, s.socket_gid) == (0o660, 65534)
    assert metrics_settings("unix:/run/m.sock", socket_mode="640", socket_group="0").socket_mode == 0o640
    monkeypatch.setenv("VPNCRYPT_METRICS", "unix:/run/e.sock")
    monkeypatch.setenv("VPNCRYPT_METRICS_SOCKET_MODE", "0o600")
    monkeypatch.setenv("VPNCRYPT_METRICS_ENDPOINTS", "1")
    s = metrics_settings()
    assert (s.unix_path, s.socket_mode, s.endpoints) == ("/run/e.sock", 0o600, True)
    assert metrics_settings(endpoints=False).endpoints is False


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"address": "unix:relative.sock"}, "a UNIX socket needs an absolute path"),
        ({"address": "unix:/" + "x" * 107}, "the path is longer than 107 bytes"),
        ({"address": "127.0.0.1:9586", "socket_mode": "0600"}, "are for a unix:PATH socket"),
        ({"address": "unix:/run/m.sock", "socket_mode": "0999"}, "permissions in octal, 0000 to 0777"),
        ({"address": "unix:/run/m.sock", "socket_mode": "1777"}, "permissions in octal, 0000 to 0777"),
        ({"address": "unix:/run/m.sock", "socket_group": "no-such-group-x"}, "no such group"),
    ],
)
def test_bad_settings_one_line(monkeypatch, kw, message):
    for name in list(os.environ):
        if name.startswith("VPNCRYPT_METRICS"):
            monkeypatch.delenv(name)
    with pytest.raises(ValueError, match=message):
        metrics_settings(**kw)


@pytest.mark.parametrize(
    "text, line, key",
    [
        # a second, empty tls_server_config would turn TLS off with PyYAML's last-wins
        (
            "tls_server_config:\n  cert_file: a.pem\n  key_file: b.pem\ntls_server_config:\n",
            4,
            "tls_server_config",
        ),
        (f"basic_auth_users:\n  alice: {HASH}\n  alice: {HASH}\n", 3, "alice"),
        (
            "http_server_config:\n  headers: {X-Frame-Options: deny, X-Frame-Options: ''}\n",
            2,
            "X-Frame-Options",
        ),
        ("basic_auth_users: {}\nbasic_auth_users:\n", 2, "basic_auth_users"),
    ],
)
def test_duplicate_keys_refused_at_any_level(tmp_path, text, line, key):
    path = _write(tmp_path, text)
    with pytest.raises(WebConfigError) as e:
        load_web_config(path)
    assert str(e.value) == f"{path}:{line}: not valid YAML (key {key} already set)"


@pytest.mark.parametrize(
    "hashed",
    [
        "$2b$99$" + 53 * "a",  # a cost bcrypt has not
        "$2y$10$" + 53 * "!",  # not bcrypt's base64
        "$2b$" + 56 * "P",  # no cost
        "$2b$03$" + 53 * "a",  # below bcrypt's 4
        "$2b$18$" + 53 * "a",  # above htpasswd's 17
        "$2b$31$" + 53 * "a",  # days per check
        "$2x$10$" + 53 * "a",  # a prefix bcrypt refuses
        "$2b$1a$" + 53 * "a",
        "$2b$10$" + 52 * "a",
        "$2b$10$" + 54 * "a",
    ],
)
def test_malformed_bcrypt_hashes_refused(tmp_path, hashed):
    path = _write(tmp_path, f"basic_auth_users:\n  alice: '{hashed}'\n")
    with pytest.raises(WebConfigError) as e:
        load_web_config(path)
    assert str(e.value).startswith(f"{path}: basic_auth_users.alice: "), str(e.value)
    assert hashed not in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("prefix", ["$2a$", "$2b$", "$2y$"])
@pytest.mark.parametrize("cost", [4, 10, 17])
def test_bcrypt_hash_forms_taken(tmp_path, prefix, cost):
    hashed = f"{prefix}{cost:02d}$" + HASH[7:]
    assert load_web_config(_write(tmp_path, f"basic_auth_users:\n  alice: '{hashed}'\n")).users


def test_deep_nesting_one_line(tmp_path):
    path = _write(tmp_path, "a: " + 5000 * "[" + 5000 * "]" + "\n")
    with pytest.raises(WebConfigError) as e:
        load_web_config(path)
    assert str(e.value) == f"{path}: nested too deeply to be read"


def test_file_over_1_mib_refused(tmp_path):
    path = _write(tmp_path, "# a comment\n" * (1048576 // 12 + 1))
    assert os.path.getsize(path) > 1048576
    with pytest.raises(WebConfigError) as e:
        load_web_config(path)
    assert str(e.value) == f"{path}: larger than 1048576 bytes; a web config is a few hundred"
    os.truncate(path, 1048576)  # 1 MiB of comments: taken
    assert load_web_config(path).users is None
