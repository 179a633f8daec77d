"""The user's files that a command reads (a --config file, the registry's users file, the search
view's mapping file): one that cannot be read as UTF-8 text of its kind (not UTF-8, a directory,
not readable, not YAML or JSON) is one line naming the file and what to do, never a traceback
(issue 25)."""

from __future__ import annotations

import os

import pytest

from tests.support.cli import assert_clear_error, bottler

LATIN1 = "topic_prefix: caf\xe9\n".encode("latin-1")


def unreadable(tmp_path, kind: str):
    """A file of ``kind`` of unreadability, and the words its error must say."""
    path = tmp_path / "file"
    if kind == "not-utf8":
        path.write_bytes(LATIN1)
        return path, ("not UTF-8", "0xe9", "line 1")
    if kind == "directory":
        path.mkdir()
        return path, ("is a directory",)
    if kind == "no-permission":
        if os.geteuid() == 0:
            pytest.skip("root reads any file")
        path.write_text("topic_prefix: shop\n")
        path.chmod(0)
        return path, ("cannot read", "Permission denied")
    path.write_text("topic_prefix: [unclosed\n")
    return path, ("not valid YAML",)


KINDS = ["not-utf8", "directory", "no-permission", "bad-syntax"]


@pytest.mark.parametrize("kind", KINDS)
def test_an_unreadable_config_file_is_one_line(tmp_path, kind):
    path, words = unreadable(tmp_path, kind)
    for command in (["capture"], ["materialize", "postgres"], ["registry", "serve"]):
        proc = bottler(*command, "--config", str(path))
        assert_clear_error(proc, f"config file {path}", *words)
        proc = bottler(*command, env={"BOTTLER_CONFIG": str(path)})
        assert_clear_error(proc, f"config file {path}", *words)


def test_a_config_file_in_utf8_is_read_whatever_the_locale(stack, tmp_path):
    """Non-ASCII settings in a UTF-8 file, read under the C locale (ASCII): the setting's value
    arrives intact (here, refused for what it is, not for the file's encoding)."""
    path = tmp_path / "capture.yaml"
    path.write_text("topic_prefix: café\n", encoding="utf-8")
    proc = bottler("capture", "--config", str(path), env={"LC_ALL": "C", "LANG": "C",
                                                          "PYTHONUTF8": "0"})
    # (stderr is ASCII here: Python writes the é as an escape)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "--topic-prefix" in proc.stderr and "ASCII letters" in proc.stderr, proc.stderr


@pytest.mark.parametrize("kind", ["not-utf8", "directory"])
def test_an_unreadable_users_or_mapping_file_is_one_line(stack, tmp_path, kind):
    path, words = unreadable(tmp_path, kind)
    proc = bottler("registry", "serve", "--port", "1", "--broker", stack.kafka,
                   "--users-file", str(path))
    assert_clear_error(proc, f"users file {path}", *words)
    proc = bottler("materialize", "search", "--index", "probe", "--mapping", str(path),
                   "--broker", stack.kafka, "--schema-registry", stack.registry_url,
                   "--search", stack.search_url, "--once")
    assert_clear_error(proc, f"mapping file {path}", *words)
