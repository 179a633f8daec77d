"""The command shell on top of the rooms: the `bottler` command line, `bottler status`, the
migration tools and `bottler retire`."""

from common import gctune

gctune.start_up()  # before the command's imports, which are most of its start-up
