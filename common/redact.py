"""Keep secrets out of logs and errors: DSNs are shown with their password masked, and so are
client properties whose name says they hold a secret."""

import re
from collections.abc import Mapping

MASK = "***"

# postgresql://user:secret@host/db  and  kafka-style sasl URLs
_URI_PASSWORD = re.compile(r"(?P<head>[a-zA-Z][a-zA-Z0-9+.-]*://[^:/@\s]*:)(?P<pw>[^@\s]*)(?=@)")
# libpq key/value form: password=secret or password='se cret'
_KV_PASSWORD = re.compile(r"(?P<head>\bpassword\s*=\s*)(?P<pw>'(?:[^'\\]|\\.)*'|\S+)", re.I)


def redact(text: str) -> str:
    """Mask every password found in DSNs or URLs inside ``text``."""
    text = _URI_PASSWORD.sub(lambda m: m["head"] + MASK, text)
    return _KV_PASSWORD.sub(lambda m: m["head"] + MASK, text)


# Words of a client property's name that make its value a secret: sasl.password,
# basic.auth.user.info (user:password), ssl.key.password, ssl.key.pem, sasl.jaas.config,
# sasl.oauthbearer.client.secret, bearer.auth.token...
SECRET_WORDS = ("password", "secret", "token", "credentials", "key", "user.info", "jaas")


def is_secret_key(name: str) -> bool:
    """Whether a client property (or a `prop=value` pair) named ``name`` holds a secret."""
    return any(word in name.lower() for word in SECRET_WORDS)


def mask_properties(props: Mapping[str, object]) -> dict[str, object]:
    """``props`` fit to show: secret values masked, passwords in URLs too."""
    return {k: MASK if is_secret_key(k) else redact(v) if isinstance(v, str) else v
            for k, v in props.items()}


# The flags that take a PostgreSQL DSN, in every command, and where the DSN belongs instead.
DSN_FLAGS = {
    "--postgres": "BOTTLER_PG_DSN", "-d": "BOTTLER_PG_DSN",
    "--source": "BOTTLER_PG_DSN", "-s": "BOTTLER_PG_DSN",  # -s: migrate's source (or a slot)
    "--target": "BOTTLER_TARGET_DSN", "-t": "BOTTLER_TARGET_DSN",
    "--seed-from": "BOTTLER_SEED_DSN",
}


# The flags that take client properties, and where secret ones belong instead.
PROPERTY_FLAGS = {
    "-C": ("BOTTLER_KAFKA_CONFIG", "kafka"), "--kafka-config": ("BOTTLER_KAFKA_CONFIG", "kafka"),
    "-R": ("BOTTLER_REGISTRY_CONFIG", "schema_registry"),
    "--registry-config": ("BOTTLER_REGISTRY_CONFIG", "schema_registry"),
}
# The flags that take a URL, which may carry user:password.
URL_FLAGS = {"--schema-registry": "BOTTLER_REGISTRY", "-r": "BOTTLER_REGISTRY",
             "--search": "BOTTLER_SEARCH"}


def passwords_on_command_line(argv: list[str]) -> list[str]:
    """One warning per flag of ``argv`` whose value holds a password or another secret: every
    user of the machine sees a process's arguments (``ps``), never its environment or files."""
    warnings = []
    for i, arg in enumerate(argv):
        flag, sep, value = arg.partition("=")
        if not sep or not flag.startswith("-"):
            flag, value = argv[i - 1] if i else "", arg
        if (env := DSN_FLAGS.get(flag)) and redact(value) != value:
            warnings.append(
                f"the password in {flag} is visible to every user of this machine (ps): set "
                f"{env} instead, or leave the password out of the DSN and keep it in a password "
                "file (PGPASSFILE, by default ~/.pgpass)")
        elif (env := URL_FLAGS.get(flag)) and redact(value) != value:
            warnings.append(f"the password in {flag} is visible to every user of this machine "
                            f"(ps): set {env} instead")
        elif flag in PROPERTY_FLAGS and is_secret_key(value.partition("=")[0]):
            env, section = PROPERTY_FLAGS[flag]
            warnings.append(
                f"{flag} {value.partition('=')[0]} is visible to every user of this machine "
                f"(ps): give it in {env} or in the `{section}:` section of the --config file")
    return warnings
