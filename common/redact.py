"""Keep secrets out of logs and errors: DSNs are shown with their password masked."""

import re

MASK = "***"

# postgresql://user:secret@host/db  and  kafka-style sasl URLs
_URI_PASSWORD = re.compile(r"(?P<head>[a-zA-Z][a-zA-Z0-9+.-]*://[^:/@\s]*:)(?P<pw>[^@\s]*)(?=@)")
# libpq key/value form: password=secret or password='se cret'
_KV_PASSWORD = re.compile(r"(?P<head>\bpassword\s*=\s*)(?P<pw>'(?:[^'\\]|\\.)*'|\S+)", re.I)


def redact(text: str) -> str:
    """Mask every password found in DSNs or URLs inside ``text``."""
    text = _URI_PASSWORD.sub(lambda m: m["head"] + MASK, text)
    return _KV_PASSWORD.sub(lambda m: m["head"] + MASK, text)


# The flags that take a PostgreSQL DSN, in every command, and where the DSN belongs instead.
DSN_FLAGS = {
    "--postgres": "BOTTLER_PG_DSN", "-d": "BOTTLER_PG_DSN",
    "--source": "BOTTLER_PG_DSN", "-s": "BOTTLER_PG_DSN",  # -s: migrate's source (or a slot)
    "--target": "BOTTLER_TARGET_DSN", "-t": "BOTTLER_TARGET_DSN",
}


def passwords_on_command_line(argv: list[str]) -> list[str]:
    """One warning per DSN flag of ``argv`` whose value holds a password: every user of the
    machine sees a process's arguments (``ps``), never its environment or files."""
    warnings = []
    for i, arg in enumerate(argv):
        flag, sep, value = arg.partition("=")
        if not sep:
            flag, value = argv[i - 1] if i else "", arg
        env = DSN_FLAGS.get(flag)
        if env and redact(value) != value:
            warnings.append(
                f"the password in {flag} is visible to every user of this machine (ps): set "
                f"{env} instead, or leave the password out of the DSN and keep it in a password "
                "file (PGPASSFILE, by default ~/.pgpass)")
    return warnings
