"""Placeholder: this component is built by a later issue (see README)."""
