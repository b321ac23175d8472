"""The kernel's own GRO is the judge of the daemon's on reordered TCP
arrivals (issue 31 item 7): the cases of gro_reorder_cases.py written one
packet at a time into a TUN whose writes go through napi_gro_receive
(IFF_NAPI, tun_kernel_gro_child.py), in a throwaway namespace (root only).
What the kernel delivers must be the literal boundaries of each case, and
the daemon's coalescer (vc_gro_coalesce) must give the same writes."""

import pytest

from tests.dataplane.gro_reorder_cases import CASES, arrivals, runs
from tests.dataplane.netns_child import needs_root_and_tun, run_child  # noqa: F401 (autouse)
from tests.dataplane.offload_helpers import gro_coalesce


@pytest.fixture(scope="module")
def kernel():
    return run_child("vckgro", "tun_kernel_gro_child.py", timeout=120)


def daemon_runs(case, v6):
    order = CASES[case][0]
    out, i = [], 0
    for _, n in gro_coalesce(arrivals(case, v6)):
        out.append([order[i], n])
        i += n
    return out


@pytest.mark.parametrize("fam", ["ipv4", "ipv6"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_daemon_delivers_what_the_kernels_gro_delivers(kernel, case, fam):
    want = runs(CASES[case][1])
    assert kernel[fam][case] == want, "the kernel's GRO"
    assert daemon_runs(case, fam == "ipv6") == kernel[fam][case]
