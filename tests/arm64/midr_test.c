/* The arm64 core classification behind the ChaCha default (native/cpu.c):
 * vc_cpu_inorder_from_cpuinfo() on /proc/cpuinfo texts and
 * vc_cpu_inorder_from_midr() on MIDR_EL1 values (1: in-order, so "neon4";
 * 0: out-of-order, so "neon"; -1: the text names no CPU part).  Built and run
 * under qemu by tests/arm64/run.sh through test_arm64_neon.py. */
#include <stdio.h>
#include <stdint.h>
#include <string.h>

int vc_cpu_inorder_from_cpuinfo(const char *text);
int vc_cpu_inorder_from_midr(uint64_t midr);

static int passed, failed;

static void expect(const char *what, int got, int want)
{
    if (got == want) {
        passed++;
    } else {
        failed++;
        printf("FAIL %s: got %d, want %d\n", what, got, want);
    }
}

#define CPU(n, part) "processor\t: " #n "\nBogoMIPS\t: 100.00\nFeatures\t: fp asimd evtstrm crc32 cpuid\n" \
    "CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x0\nCPU part\t: " part "\nCPU revision\t: 4\n\n"

int main(void)
{
    expect("A53 x4", vc_cpu_inorder_from_cpuinfo(CPU(0, "0xd03") CPU(1, "0xd03") CPU(2, "0xd03") CPU(3, "0xd03")), 1);
    expect("A55", vc_cpu_inorder_from_cpuinfo(CPU(0, "0xd05")), 1);
    expect("A57", vc_cpu_inorder_from_cpuinfo(CPU(0, "0xd07") CPU(1, "0xd07")), 0);
    expect("A72", vc_cpu_inorder_from_cpuinfo(CPU(0, "0xd08")), 0);
    expect("Neoverse N1", vc_cpu_inorder_from_cpuinfo(CPU(0, "0xd0c")), 0);
    expect("A76 + A55 big.LITTLE", vc_cpu_inorder_from_cpuinfo(CPU(0, "0xd05") CPU(1, "0xd05") CPU(4, "0xd0b")), 1);
    expect("A72 + A53 big.LITTLE", vc_cpu_inorder_from_cpuinfo(CPU(0, "0xd08") CPU(1, "0xd03")), 1);
    /* a part number 0xd03 from another implementer is not a Cortex-A53 */
    expect("other implementer", vc_cpu_inorder_from_cpuinfo(
        "processor\t: 0\nCPU implementer\t: 0x51\nCPU part\t: 0xd03\n"), 0);
    expect("no CPU part (qemu, some VMs)", vc_cpu_inorder_from_cpuinfo("processor\t: 0\nBogoMIPS\t: 2000\n"), -1);
    expect("empty", vc_cpu_inorder_from_cpuinfo(""), -1);
    expect("no trailing newline", vc_cpu_inorder_from_cpuinfo("CPU implementer : 0x41\nCPU part : 0xd03"), 1);
    expect("MIDR A53 r0p4", vc_cpu_inorder_from_midr(0x410fd034), 1);
    expect("MIDR A55 r1p0", vc_cpu_inorder_from_midr(0x411fd050), 1);
    expect("MIDR A57", vc_cpu_inorder_from_midr(0x411fd070), 0);
    expect("MIDR A72", vc_cpu_inorder_from_midr(0x410fd083), 0);
    expect("MIDR other implementer", vc_cpu_inorder_from_midr(0x510fd030), 0);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
