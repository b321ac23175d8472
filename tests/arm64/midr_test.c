/* The arm64 ChaCha default choice by core type (native/chacha_neon.c):
 * vc_chacha_choice_from_cpuinfo() on /proc/cpuinfo texts and
 * vc_chacha_choice_from_midr() on MIDR_EL1 values.  Built and run under qemu by
 * tests/arm64/run.sh through test_arm64_neon.py. */
#include <stdio.h>
#include <stdint.h>
#include <string.h>

const char *vc_chacha_choice_from_cpuinfo(const char *text);
const char *vc_chacha_choice_from_midr(uint64_t midr);

static int passed, failed;
static void expect(const char *what, const char *got, const char *want) {
    int ok = (got == NULL && want == NULL) || (got && want && strcmp(got, want) == 0);
    if (ok) passed++;
    else { failed++; printf("FAIL %s: got %s, want %s\n", what, got ? got : "NULL", want ? want : "NULL"); }
}

#define CPU(n, part) "processor\t: " #n "\nBogoMIPS\t: 100.00\nFeatures\t: fp asimd evtstrm crc32 cpuid\n" \
    "CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x0\nCPU part\t: " part "\nCPU revision\t: 4\n\n"

int main(void) {
    expect("A53 x4", vc_chacha_choice_from_cpuinfo(CPU(0, "0xd03") CPU(1, "0xd03") CPU(2, "0xd03") CPU(3, "0xd03")), "neon4");
    expect("A55", vc_chacha_choice_from_cpuinfo(CPU(0, "0xd05")), "neon4");
    expect("A57", vc_chacha_choice_from_cpuinfo(CPU(0, "0xd07") CPU(1, "0xd07")), "neon");
    expect("A72", vc_chacha_choice_from_cpuinfo(CPU(0, "0xd08")), "neon");
    expect("Neoverse N1", vc_chacha_choice_from_cpuinfo(CPU(0, "0xd0c")), "neon");
    expect("A76 + A55 big.LITTLE", vc_chacha_choice_from_cpuinfo(CPU(0, "0xd05") CPU(1, "0xd05") CPU(4, "0xd0b")), "neon4");
    expect("A72 + A53 big.LITTLE", vc_chacha_choice_from_cpuinfo(CPU(0, "0xd08") CPU(1, "0xd03")), "neon4");
    /* a part number 0xd03 from another implementer is not a Cortex-A53 */
    expect("other implementer", vc_chacha_choice_from_cpuinfo(
        "processor\t: 0\nCPU implementer\t: 0x51\nCPU part\t: 0xd03\n"), "neon");
    expect("no CPU part (qemu, some VMs)", vc_chacha_choice_from_cpuinfo("processor\t: 0\nBogoMIPS\t: 2000\n"), NULL);
    expect("empty", vc_chacha_choice_from_cpuinfo(""), NULL);
    expect("no trailing newline", vc_chacha_choice_from_cpuinfo("CPU implementer : 0x41\nCPU part : 0xd03"), "neon4");
    expect("MIDR A53 r0p4", vc_chacha_choice_from_midr(0x410fd034), "neon4");
    expect("MIDR A55 r1p0", vc_chacha_choice_from_midr(0x411fd050), "neon4");
    expect("MIDR A57", vc_chacha_choice_from_midr(0x411fd070), "neon");
    expect("MIDR A72", vc_chacha_choice_from_midr(0x410fd083), "neon");
    expect("MIDR other implementer", vc_chacha_choice_from_midr(0x510fd030), "neon");
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
