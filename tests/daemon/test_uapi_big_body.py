"""A set request of more than 16 MiB is read whole, as wireguard-go takes it
(600,000 allowed IPs make about 16.8 MB; vpncrypt answered ENOMEM above
16 MiB, found by the outside review of issue 18)."""

import asyncio

from vpncrypt.daemon.uapi_framing import read_body


def test_a_body_of_seventeen_mebibytes_is_read_whole():
    line = b"allowed_ip=10.%d.%d.%d/32\n"
    body = b"".join(line % (i >> 16 & 255, i >> 8 & 255, i & 255) for i in range(700_000))
    assert len(body) > 17 * 1024 * 1024

    async def main():
        reader = asyncio.StreamReader(limit=2**20)
        reader.feed_data(body + b"\n")
        reader.feed_eof()
        return await read_body(reader)

    got = asyncio.run(main())
    assert isinstance(got, bytes) and got == body
