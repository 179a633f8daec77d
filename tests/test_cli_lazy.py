"""`bottler` imports a command's module only when that command runs (bottler/lazy.py): a
capture's start does not pay for the migration's, the views' or the registry client's imports,
and every command is still there, by name, with its extra's check."""

from __future__ import annotations

import subprocess
import sys

import pytest
import typer
from pydantic import ValidationError

from bottler.cli import app
from capture.settings import CaptureSettings

HEAVY = ("bottler.migrate", "materializers", "confluent_kafka.schema_registry", "pyspark")


def _imported_by(code: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys\n"
         f"print(' '.join(m for m in sys.modules if m.startswith({HEAVY!r})))"],
        capture_output=True, text=True, check=True).stdout
    return out.split()


def test_the_command_line_imports_no_other_rooms_command():
    assert _imported_by("import bottler.cli") == []


def test_the_captures_settings_import_no_registry_client_for_a_plain_url():
    code = ("from capture.settings import CaptureSettings\n"
            "CaptureSettings(postgres='postgresql://u@h/db', "
            "schema_registry='http://127.0.0.1:1,https://r.example:8081')")
    assert _imported_by(code) == []


def test_a_registry_url_the_client_would_refuse_is_still_refused_by_the_settings():
    with pytest.raises(ValidationError, match="the registry client refuses it: Invalid url"):
        CaptureSettings(postgres="postgresql://u@h/db", schema_registry="ftp://r.example")


def test_every_command_is_found_by_name_and_loaded_once():
    root = typer.main.get_command(app)
    names = list(root.commands)
    assert {"capture", "slot", "materialize", "warehouse", "migrate", "status", "translate",
            "reindex", "stack", "retire"} <= set(names)
    materialize = root.commands["materialize"]
    assert list(materialize.commands) == ["postgres", "search", "warehouse"]
    warehouse = materialize.commands["warehouse"]
    assert warehouse is materialize.commands["warehouse"]  # made once
    assert warehouse.name == "warehouse" and warehouse.callback.extra == "warehouse"
    assert root.commands["migrate"].name == "migrate"
