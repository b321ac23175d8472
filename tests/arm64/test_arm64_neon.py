"""arm64-only checks: the kernel list and the default choice by core type.
The crypto behaviour itself is covered by tests/crypto, which parametrizes over
every kernel (generic, neon4, neon here)."""

import os
import subprocess
import sys

import pytest

import vpncrypt.crypto as vc

QEMU = os.environ.get("VPNCRYPT_ARM64_QEMU")
MIDR_TEST = os.environ.get("VPNCRYPT_ARM64_MIDR_TEST")


def _need(var, value):
    if not value:
        pytest.fail(f"{var} is not set: run these tests through tests/arm64/run.sh")
    return value


def test_kernel_lists():
    assert vc.implementations() == ["generic", "neon4", "neon"]
    assert vc.poly1305_implementations() == ["generic", "neon"]
    assert vc.active_poly1305_implementation() == "neon"
    assert vc.nh_implementations() == ["generic", "neon"]
    assert vc.active_nh_implementation() == "neon"


def test_adiantum_on_neon_uses_the_neon_nh_and_libcrypto():
    """The arm64 build runs Adiantum's hash on the NEON NH kernel and gets its
    AES-256 from the sysroot's libcrypto (dlopen under qemu)."""
    assert vc.adiantum_aes_available()
    vc.use_nh_implementation("neon")
    ct = vc.adiantum_encrypt(bytes(32), b"", bytes(64))
    assert vc.last_nh_kernel() == "neon"
    assert vc.adiantum_decrypt(bytes(32), b"", ct) == bytes(64)


def test_choice_logic_in_c():
    out = subprocess.run(
        [_need("VPNCRYPT_ARM64_QEMU", QEMU), _need("VPNCRYPT_ARM64_MIDR_TEST", MIDR_TEST)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert " 0 failed" in out.stdout


CPUINFO = (
    "processor\t: {n}\nFeatures\t: fp asimd\nCPU implementer\t: 0x41\n"
    "CPU architecture: 8\nCPU variant\t: 0x0\nCPU part\t: {part}\nCPU revision\t: 4\n\n"
)


@pytest.mark.parametrize(
    "parts,want",
    [
        (["0xd03"] * 4, "neon4"),  # Cortex-A53
        (["0xd05", "0xd05"], "neon4"),  # Cortex-A55
        (["0xd07"] * 2, "neon"),  # Cortex-A57
        (["0xd05", "0xd0b"], "neon4"),  # A55 + A76: the thread may run on the little core
        (["0xd0c"], "neon"),  # Neoverse N1
    ],
)
def test_default_follows_cpuinfo(tmp_path, parts, want):
    info = tmp_path / "cpuinfo"
    info.write_text("".join(CPUINFO.format(n=i, part=p) for i, p in enumerate(parts)))
    env = dict(os.environ, VPNCRYPT_NEON_CPUINFO=str(info))
    env.pop("VPNCRYPT_CHACHA_IMPL", None)
    code = "import vpncrypt.crypto as c; print(c.active_implementation())"
    cmd = [sys.executable, "-c", code]  # run.sh's wrapper: qemu + the sysroot's python3
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == want


# What qemu-user shows an arm64 guest: the x86 host's cpuinfo, no CPU part.
HOST_CPUINFO = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R)\n\n"


@pytest.mark.parametrize(
    "qemu_cpu,want", [("cortex-a53", "neon4"), ("cortex-a57", "neon"), ("cortex-a72", "neon")]
)
def test_default_from_midr_when_cpuinfo_names_no_part(tmp_path, qemu_cpu, want):
    """No CPU part in cpuinfo and no sysfs MIDR (qemu-user): the core is read
    from MIDR_EL1 itself, which the kernel emulates under HWCAP_CPUID."""
    _need("VPNCRYPT_ARM64_QEMU", QEMU)  # QEMU_CPU picks the core the wrapper emulates
    info = tmp_path / "cpuinfo"
    info.write_text(HOST_CPUINFO)
    env = dict(os.environ, VPNCRYPT_NEON_CPUINFO=str(info), QEMU_CPU=qemu_cpu)
    env.pop("VPNCRYPT_CHACHA_IMPL", None)
    code = "import vpncrypt.crypto as c; print(c.active_implementation())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == want


def test_every_kernel_pair_agrees_on_a_packet():
    key, nonce = bytes(range(32)), bytes(12)
    msg = bytes(range(256)) * 5 + b"tail"
    results = set()
    for c in vc.implementations():
        for p in vc.poly1305_implementations():
            vc.use_implementation(c)
            vc.use_poly1305_implementation(p)
            results.add(vc.seal(key, nonce, msg, b"aad"))
    vc.use_implementation("neon")
    vc.use_poly1305_implementation("neon")
    assert len(results) == 1
