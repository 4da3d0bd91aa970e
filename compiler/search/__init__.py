"""The e-graph search: graphs in and out of egglog, rule sets, and bounded runs (see shared/notes/egglog.md)."""
