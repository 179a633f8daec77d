"""`bottler status`: one live view of the slot, the topics and every materializer."""
