"""The metadata store: ORM tables, sessions and migrations, and the only module family that issues queries."""
