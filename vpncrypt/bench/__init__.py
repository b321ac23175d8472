"""vpncrypt.bench: the benches an operator runs.  `vpncrypt loopback-bench`
(loopback.py, with limit.py), `vpncrypt bench crypto` (ciphers.py) and
`vpncrypt bench tunnel` (tunnel.py, with its namespace lab nslab.py, its
byte check streamcheck.py and qdisc.py); report.py and machine.py are their
shared output pieces.  The lab benches only this project's tests and
benchmarks need live in tests/benchlab/, outside the installed package."""
