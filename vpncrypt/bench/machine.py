"""Facts about the machine that every benchmark report carries."""


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo ("unknown" if it has none)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"
