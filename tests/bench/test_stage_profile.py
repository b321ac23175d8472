"""native/bench/stage_profile.py puts each perf sample in one data-plane stage
by its call chain (leaf first).  Under the one-call rounds (vc_wg_*_round)
the native frames between the round and the kernel are lost (libc's system
call wrappers keep no frame pointer), so a system call is named by the
kernel's own symbols."""

import importlib.util
import pathlib

import pytest

PATH = pathlib.Path(__file__).resolve().parents[2] / "native" / "bench" / "stage_profile.py"
spec = importlib.util.spec_from_file_location("stage_profile", PATH)
stage_profile = importlib.util.module_from_spec(spec)
spec.loader.exec_module(stage_profile)

K = "[kernel.kallsyms]"
LIBC = "/usr/lib/x86_64-linux-gnu/libc.so.6"
NATIVE = "/x/vpncrypt/_native.cpython-311-x86_64-linux-gnu.so"


@pytest.mark.parametrize(
    "kernel_leaf, stage",
    [
        ("__sys_recvmmsg", "UDP receive (kernel: recvmmsg)"),
        ("__sys_sendmmsg", "UDP send (kernel: sendmmsg)"),
        ("tun_chr_read_iter", "TUN read (kernel: readv)"),
        ("tun_chr_write_iter", "TUN write (kernel: write)"),
        ("__x64_sys_getpid", "other system calls"),
    ],
)
def test_a_system_call_under_a_round_is_named_by_the_kernel(kernel_leaf, stage):
    frames = [
        (kernel_leaf, K),
        ("do_syscall_64", K),
        ("entry_SYSCALL_64_after_hwframe", K),
        ("syscall", "/usr/lib/x86_64-linux-gnu/libc.so.6"),
        ("vc_wg_receive_round", NATIVE),
        ("_cffi_f_vc_wg_receive_round", NATIVE),
    ]
    assert stage_profile.stage_of(frames) == stage


@pytest.mark.parametrize(
    "chain, stage",
    [
        # a TUN write and a TUN read both pass do_iter_readv_writev (kernel 6.x)
        (
            [
                "_copy_from_iter",
                "tun_get_user",
                "tun_chr_write_iter",
                "do_iter_readv_writev",
                "vfs_writev",
                "do_writev",
            ],
            "TUN write (kernel: write)",
        ),
        (
            [
                "_copy_to_iter",
                "tun_do_read",
                "tun_chr_read_iter",
                "do_iter_readv_writev",
                "vfs_readv",
                "do_readv",
            ],
            "TUN read (kernel: readv)",
        ),
        # the receiver woken on the way back to user mode after its TUN write
        (
            ["finish_task_switch.isra.0", "schedule", "exit_to_user_mode_loop", "do_writev"],
            "TUN write (kernel: write)",
        ),
        (
            ["_copy_to_iter", "__skb_datagram_iter", "udpv6_recvmsg", "do_recvmmsg"],
            "UDP receive (kernel: recvmmsg)",
        ),
    ],
)
def test_a_whole_kernel_chain_is_named_by_its_system_call(chain, stage):
    _assert_stage([(sym, K) for sym in chain], stage)


def test_a_chain_that_ends_on_the_way_back_is_named_by_libcs_wrapper():
    # the task switch a TUN write's wake-ups caused, after its handler returned
    back = [("finish_task_switch.isra.0", K), ("schedule", K), ("exit_to_user_mode_loop", K)]
    _assert_stage(back + [("__GI___writev", LIBC)], "TUN write (kernel: write)")
    _assert_stage(back + [("__GI___readv", LIBC)], "TUN read (kernel: readv)")
    _assert_stage(back + [("sendmmsg", LIBC)], "UDP send (kernel: sendmmsg)")
    _assert_stage(back, "other system calls")


def _assert_stage(chain, stage):
    frames = chain + [
        ("do_syscall_64", K),
        ("entry_SYSCALL_64_after_hwframe", K),
        ("vc_wg_receive_rounds", NATIVE),
        ("_cffi_f_vc_wg_receive_rounds", NATIVE),
    ]
    assert stage_profile.stage_of(frames) == stage


def test_the_rounds_own_c_code_and_a_known_entry_keep_their_stages():
    assert (
        stage_profile.stage_of([("vc_wg_receive_round", NATIVE)])
        == "other native calls (timers, table upkeep)"
    )
    sealed = [("chacha20_avx512", NATIVE), ("vc_wg_seal_batch", NATIVE), ("vc_wg_send_round", NATIVE)]
    assert stage_profile.stage_of(sealed) == "seal (table, ChaCha20-Poly1305)"
