"""The --name=value overrides of train.py and sample.py."""


def apply_overrides(argv, settings):
    """Sets settings[name] = value for each --name=value in argv, parsed as the setting's type
    (bools from 1/true/yes)."""
    for arg in argv:
        if not arg.startswith("--") or "=" not in arg:
            raise SystemExit(f"expected --name=value, got {arg!r}")
        k, v = arg[2:].split("=", 1)
        if k not in settings or k.startswith("_"):
            raise SystemExit(f"unknown setting {k!r}")
        old = settings[k]
        settings[k] = v.lower() in ("1", "true", "yes") if isinstance(old, bool) else type(old)(v)
