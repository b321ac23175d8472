"""tests/tools/debian_sources.py: this machine's Debian entries moved to another
suite, third-party entries left out (pure text rewriting; no network)."""

from tests.tools.debian_sources import rewrite_deb822, rewrite_one_line

DEB822 = """Types: deb
# a comment
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main

Types: deb
URIs: https://thirdparty.example/apt
Suites: nodistro
Components: main

Types: deb
Enabled: no
URIs: http://mirror.example/old
Suites: bookworm
Components: main
"""


def test_deb822_entries_move_to_the_new_suite():
    out = rewrite_deb822(DEB822, "bookworm", "trixie")
    stanzas = out.strip().split("\n\n")
    assert len(stanzas) == 2
    assert "Suites: trixie trixie-updates" in stanzas[0]
    assert "URIs: http://mirror.example/debian\n" in stanzas[0]
    assert "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" in stanzas[0]
    assert "Suites: trixie-security" in stanzas[1]
    assert "bookworm" not in out and "thirdparty" not in out and "/old" not in out


def test_one_line_entries_move_to_the_new_suite():
    text = (
        "deb http://mirror.example/debian bookworm main contrib\n"
        "deb [signed-by=/k.gpg arch=amd64] http://mirror.example/debian-security "
        "bookworm-security main\n"
        "deb-src http://mirror.example/debian bookworm main\n"
        "deb https://thirdparty.example/apt cloud-sdk-bookworm main\n"
        "# deb http://mirror.example/debian bookworm main\n"
    )
    out = rewrite_one_line(text, "bookworm", "trixie")
    assert out == (
        "deb http://mirror.example/debian trixie main contrib\n"
        "deb [signed-by=/k.gpg arch=amd64] http://mirror.example/debian-security "
        "trixie-security main\n"
    )


def test_nothing_of_the_release_gives_nothing():
    assert rewrite_one_line("deb http://x/ sid main\n", "bookworm", "trixie") == ""
    assert rewrite_deb822("Types: deb\nURIs: http://x/\nSuites: sid\n", "bookworm", "trixie") == ""


def test_sid_keeps_only_the_release_suite():
    # sid has no sid-updates, sid-security or sid-backports: the archive
    # publishes none, and a source for one fails `apt-get update`
    assert rewrite_deb822(DEB822, "bookworm", "sid") == (
        "Types: deb\n"
        "URIs: http://mirror.example/debian\n"
        "Suites: sid\n"
        "Components: main\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
    )


def test_sid_one_line_entries_drop_the_companion_suites():
    text = (
        "deb http://mirror.example/debian bookworm main\n"
        "deb http://mirror.example/debian bookworm-updates main\n"
        "deb http://mirror.example/debian bookworm-backports main\n"
        "deb http://mirror.example/debian-security bookworm-security main\n"
    )
    for rolling in ("sid", "unstable", "experimental"):
        assert rewrite_one_line(text, "bookworm", rolling) == (
            f"deb http://mirror.example/debian {rolling} main\n"
        )


def test_a_security_only_source_gives_nothing_for_sid():
    text = "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n"
    assert rewrite_deb822(text, "bookworm", "sid") == ""
    assert "Suites: trixie-security" in rewrite_deb822(text, "bookworm", "trixie")


def test_stable_releases_keep_their_companions():
    text = "deb http://mirror.example/debian bookworm-backports main\n"
    assert rewrite_one_line(text, "bookworm", "trixie") == (
        "deb http://mirror.example/debian trixie-backports main\n"
    )
