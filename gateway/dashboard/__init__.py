"""The dashboard served at /dashboard: its metric sampler, and the static page (static/) the gateway serves."""
