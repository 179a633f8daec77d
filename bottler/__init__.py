"""The command shell on top of the rooms: the `bottler` command line, `bottler status`, the
migration tools and `bottler retire`."""
