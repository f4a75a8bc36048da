"""tgweb.io."""
