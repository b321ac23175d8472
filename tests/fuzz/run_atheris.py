"""Run one fuzz target under atheris (coverage-guided, libFuzzer engine):

    python -m tests.fuzz.run_atheris TARGET [libFuzzer flags] [CORPUS_DIR ...]

TARGET is a key of targets.TARGETS.  vpncrypt and the harness are imported
with atheris' coverage instrumentation.  Any exception escaping the target is
a crash: atheris prints it and writes the input to -artifact_prefix.
"""

import sys

import atheris

with atheris.instrument_imports(include=["vpncrypt", "tests.fuzz.targets"]):
    import vpncrypt.daemon.device_control  # noqa: F401  (DeviceControl, used by the uapi target)
    from tests.fuzz import targets


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in targets.TARGETS:
        sys.exit(f"usage: run_atheris.py {{{','.join(targets.TARGETS)}}} [libFuzzer args]")
    target = targets.TARGETS[sys.argv[1]]
    atheris.Setup([sys.argv[0]] + sys.argv[2:], target)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
