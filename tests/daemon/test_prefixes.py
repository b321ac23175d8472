"""The IPv4 fast path of parse_network takes and gives exactly what the
general rule (split_prefix + ipaddress) does, for well-formed and malformed
text alike."""

import ipaddress
import random

from vpncrypt.config.prefixes import parse_network, split_prefix


def general(text):
    try:
        return ipaddress.ip_network(split_prefix(text, need_bits=True), strict=False)
    except ValueError:
        return None


def fast(text):
    try:
        return parse_network(text, need_bits=True)
    except ValueError:
        return None


def test_fixed_cases():
    assert str(parse_network("10.1.2.3/24")) == "10.1.2.0/24"
    assert str(parse_network("255.255.255.255/0")) == "0.0.0.0/0"
    assert str(parse_network("192.0.2.77/32")) == "192.0.2.77/32"
    for bad in (
        "10.1.2.3/33",
        "10.1.2.3/024",
        "010.1.2.3/24",
        "10.1/8",
        "1.2.3.4/00",
        "1.2.3.4/\u0663",
        "1.2.3.4/+8",
        "1.2.3.4/-0",
        "1.2.3.4/",
        "/8",
        "1.2.3.4.5/8",
        "1.2.3.256/8",
        "0x1.2.3.4/8",
        "1.2.3.4/8/8",
        "1.2.3.4%eth0/32",
    ):
        assert fast(bad) is None, bad


def test_same_answer_as_the_general_rule_on_random_text():
    rng = random.Random(1)
    parts = ["0", "00", "01", "1", "9", "10", "99", "255", "256", "300", "", "a", "\u0661", "+1"]
    for _ in range(20000):
        quad = ".".join(rng.choice(parts) for _ in range(rng.choice((3, 4, 4, 4, 5))))
        text = f"{quad}/{rng.choice(parts + ['24', '32', '33', '08', '8'])}"
        assert fast(text) == general(text), text
