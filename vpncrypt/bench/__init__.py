"""vpncrypt.bench: benchmarks (``vpncrypt bench crypto`` lives in vpncrypt.bench.crypto)."""
