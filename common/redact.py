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
