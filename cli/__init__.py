"""The `luminal` command: serve the platform, deploy models, manage keys and deployments, predict, compile, usage."""
