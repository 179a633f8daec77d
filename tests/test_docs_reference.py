"""docs/configuration.md cannot go stale: every command of `bottler` has a section there, and
each section names every flag, argument and environment variable of its command, and (for the
capture) every YAML key. The commands are read from the command line itself (typer's click
tree), so a new flag without documentation fails here; and each setting's row says the
variable, the key and the default its declaration gives (common/flags.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer

from bottler.cli import LoadSettings, StackResetSettings, StackSettings, StackUpSettings, app
from bottler.migrate.cli import CutoverSettings, MigrateStatusSettings, VerifySettings
from bottler.retire import RetireSettings
from bottler.status.cli import StatusSettings
from capture.settings import CONFIG_ENV, CaptureSettings
from common import flags
from materializers.postgres.cli import ReplicaSettings
from materializers.search.cli import ReindexSettings, SearchSettings
from materializers.translators.cli import TranslateSettings
from materializers.warehouse.cli import WarehouseSettings
from schemas.registry_server.settings import ServeSettings

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "configuration.md"
SOURCES = ("bottler", "capture", "schemas", "materializers", "compose")


def leaf_commands(command=None, path=("bottler",)):
    """(path, command) for every command that runs something, depth first: leaves, and groups
    that run themselves without a subcommand (`bottler capture`)."""
    command = command or typer.main.get_command(app)
    subcommands = getattr(command, "commands", None)
    if subcommands is None or getattr(command, "invoke_without_command", False):
        yield " ".join(path), command
    if subcommands is None:
        return
    for name, sub in sorted(subcommands.items()):
        yield from leaf_commands(sub, (*path, name))


COMMANDS = dict(leaf_commands())


def sections() -> dict[str, str]:
    """The text under each `## \\`bottler ...\\`` heading, by command."""
    text = REFERENCE.read_text()
    parts = re.split(r"^## `(bottler[^`]*)`\s*$", text, flags=re.MULTILINE)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts), 2)}


def environment_names(param) -> set[str]:
    """The variables an option reads: its own envvar, and those its help names (the options
    that read the environment themselves say so in their help)."""
    names = set()
    if param.envvar:
        names |= {param.envvar} if isinstance(param.envvar, str) else set(param.envvar)
    names |= set(re.findall(r"BOTTLER_[A-Z0-9_]+", getattr(param, "help", None) or ""))
    return names


def test_every_command_is_walked() -> None:
    # the walk itself must find the command line's commands, or every test below is vacuous
    assert {"bottler capture", "bottler stack up", "bottler materialize search",
            "bottler migrate verify", "bottler warehouse vacuum"} <= set(COMMANDS)
    assert all(command.params for command in COMMANDS.values())


def test_every_command_has_a_section() -> None:
    documented = sections()
    missing = sorted(set(COMMANDS) - set(documented))
    assert not missing, f"docs/configuration.md has no section for {missing}"
    stale = sorted(set(documented) - set(COMMANDS))
    assert not stale, f"docs/configuration.md documents commands that do not exist: {stale}"


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_flag_and_variable_is_in_its_section(name: str) -> None:
    section = sections().get(name, "")
    missing = []
    for param in COMMANDS[name].params:
        if param.param_type_name == "argument":
            names = {param.name.upper()}
        else:
            names = set(param.opts) | set(param.secondary_opts)
        names |= environment_names(param)
        missing += [n for n in sorted(names) if f"`{n}`" not in section]
    assert not missing, f"the section of `{name}` does not name {missing}"


def test_every_capture_setting_is_documented_as_variable_and_yaml_key() -> None:
    section = sections()["bottler capture"]
    missing = []
    for field, info in CaptureSettings.model_fields.items():
        if info.exclude:
            continue
        variables = (info.validation_alias.choices if info.validation_alias
                     else [f"BOTTLER_{field.upper()}"])
        missing += [f"`{v}`" for v in variables if f"`{v}`" not in section]
        if f"`{field}`" not in section:
            missing.append(f"YAML key `{field}`")
    if f"`{CONFIG_ENV}`" not in section:
        missing.append(CONFIG_ENV)
    assert not missing, f"the capture's section does not name {missing}"


# The settings class of every command on the one configuration system.
SETTINGS = {
    "bottler capture": CaptureSettings, "bottler materialize postgres": ReplicaSettings,
    "bottler materialize search": SearchSettings, "bottler reindex": ReindexSettings,
    "bottler materialize warehouse": WarehouseSettings, "bottler translate": TranslateSettings,
    "bottler status": StatusSettings, "bottler migrate status": MigrateStatusSettings,
    "bottler migrate cutover": CutoverSettings,
    "bottler migrate verify": VerifySettings, "bottler registry serve": ServeSettings,
    "bottler demo load": LoadSettings, "bottler stack up": StackUpSettings,
    "bottler stack down": StackSettings, "bottler stack status": StackSettings,
    "bottler stack reset": StackResetSettings, "bottler retire": RetireSettings,
}
# Keys not spelled like a flag of the command (the flag's long name with _ for -).
NOT_FLAGS = {"kafka": "--kafka-config", "schema_registry": "--schema-registry"}


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_every_setting_is_a_flag_or_a_documented_key(name: str) -> None:
    """Each setting of the command is reachable: a flag whose name gives its key (documented by
    the rule), or a key its section names; and the command takes --config."""
    command, section = COMMANDS[name], sections()[name]
    flags = {opt for param in command.params for opt in param.opts}
    assert "--config" in flags, f"`{name}` has no --config"
    missing = []
    for field, info in SETTINGS[name].model_fields.items():
        if info.exclude:
            continue
        flag = NOT_FLAGS.get(field, "--" + field.replace("_", "-"))
        if flag not in flags and f"`{field}`" not in section:
            missing.append(field)
    assert not missing, f"`{name}`: settings neither a flag nor named in its section: {missing}"


def rows(section: str) -> list[dict[str, str]]:
    """The rows of the section's tables, each by its table's column names."""
    found, header = [], None
    for line in section.splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
        elif not set(line) <= set("|-: "):
            found.append(dict(zip(header, cells, strict=False)))
    return found


def plain(text: str) -> str:
    """A cell as its words: no code marks, no thousands separators."""
    return re.sub(r"(?<=\d),(?=\d{3})", "", text.replace("`", "")).strip().lower()


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_each_setting_row_says_what_its_declaration_does(name: str) -> None:
    """The row of each option names the option's variable and key, and shows its default."""
    table = rows(sections()[name])
    wrong = []
    for option in flags.options(SETTINGS[name]):
        row = next((r for r in table if re.search(
            rf"`{option.flag.long}`(?![\w-])", next(iter(r.values()), ""))), None)
        if row is None:
            wrong.append(f"{option.flag.long}: no row")
            continue
        if f"`{option.env}`" not in row.get("environment", ""):
            wrong.append(f"{option.flag.long}: environment is not `{option.env}`")
        key = row.get("YAML key")
        if key is not None and f"`{option.field}`" not in key and f"`{option.param}`" not in key:
            wrong.append(f"{option.flag.long}: YAML key is not `{option.field}`")
        if option.default is not None and plain(row["default"]) != plain(option.default):
            wrong.append(f"{option.flag.long}: default {row['default']!r}, "
                         f"declared {option.default!r}")
    assert not wrong, f"docs/configuration.md, `{name}`: {wrong}"


def test_the_commands_with_clients_take_client_properties() -> None:
    """Kafka client properties wherever Kafka is read, registry ones wherever schemas are."""
    for name, cls in SETTINGS.items():
        flags = {opt for param in COMMANDS[name].params for opt in param.opts}
        if "kafka" in cls.model_fields:
            assert {"-C", "--kafka-config"} <= flags, name
        if "schema_registry" in cls.model_fields:
            assert {"-R", "--registry-config"} <= flags, name


def test_every_variable_the_code_reads_is_documented() -> None:
    """Any BOTTLER_* name in the sources (a variable some part reads) is in the reference."""
    text = REFERENCE.read_text()
    found: set[str] = set()
    for package in SOURCES:
        for path in (ROOT / package).rglob("*.py"):
            found |= set(re.findall(r"BOTTLER_[A-Z0-9_]*[A-Z0-9]", path.read_text()))
    assert "BOTTLER_PG_DSN" in found
    missing = sorted(v for v in found if f"`{v}" not in text)
    assert not missing, f"docs/configuration.md does not mention {missing}"


def slug(heading: str) -> str:
    """GitHub's anchor of a markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.MULTILINE | re.DOTALL)
    return {slug(h) for h in re.findall(r"^#+ (.+)$", text, flags=re.MULTILINE)}


DOCS = sorted((ROOT / "docs").glob("*.md"))


@pytest.mark.parametrize("page", [ROOT / "README.md", *DOCS], ids=lambda p: p.name)
def test_links_between_docs_resolve(page: Path) -> None:
    """Every relative link of the README and docs/ names a file that exists and, with #anchor,
    a heading of that file."""
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists() or (
                anchor and file.suffix == ".md" and anchor not in anchors(file)):
            broken.append(target)
    assert not broken, f"{page.name}: broken links {broken}"


def test_the_readme_indexes_every_doc() -> None:
    readme = (ROOT / "README.md").read_text()
    missing = [p.name for p in DOCS if f"(docs/{p.name})" not in readme]
    assert not missing, f"README.md does not link {missing}"


def test_the_stack_ports_shown_are_the_stacks_defaults() -> None:
    """`stack up`'s port defaults are compose.stack.Ports' (the help and this page show them)."""
    from compose.stack import Ports

    shown = {o.field.removesuffix("_port"): o.default for o in flags.options(StackUpSettings)
             if o.field.endswith("_port")}
    assert shown == {name: str(port) for name, port in vars(Ports()).items()}
