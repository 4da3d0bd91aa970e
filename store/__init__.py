"""What every platform component shares, below all of them: `settings` (the one `Settings`, read from `LUMINAL_*`),
the metadata store (`tables`, `database` and the query modules: the only code that issues SQL), its Alembic
`migrations/`, the artifact store (`artifacts`) and the injectable `clock`. It imports no other platform component."""
