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
    text = ("deb http://mirror.example/debian bookworm main contrib\n"
            "deb [signed-by=/k.gpg arch=amd64] http://mirror.example/debian-security "
            "bookworm-security main\n"
            "deb-src http://mirror.example/debian bookworm main\n"
            "deb https://thirdparty.example/apt cloud-sdk-bookworm main\n"
            "# deb http://mirror.example/debian bookworm main\n")
    out = rewrite_one_line(text, "bookworm", "trixie")
    assert out == ("deb http://mirror.example/debian trixie main contrib\n"
                   "deb [signed-by=/k.gpg arch=amd64] http://mirror.example/debian-security "
                   "trixie-security main\n")


def test_nothing_of_the_release_gives_nothing():
    assert rewrite_one_line("deb http://x/ sid main\n", "bookworm", "trixie") == ""
    assert rewrite_deb822("Types: deb\nURIs: http://x/\nSuites: sid\n", "bookworm", "trixie") == ""
