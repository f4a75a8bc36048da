"""tgweb.optim."""
