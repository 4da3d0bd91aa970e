"""Alembic's environment: runs on the connection the app passes in, or on the URL of `alembic -x url=...`
(else $LUMINAL_DATABASE_URL, else the Settings default)."""

from alembic import context

from luminal.store.tables import Base

config = context.config


def _url() -> str:
    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option("sqlalchemy.url")
    if url:
        return url
    from luminal.store.settings import Settings

    return Settings().resolved_database_url


def run_migrations() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
        return
    from luminal.store.database import make_engine

    engine = make_engine(_url())
    with engine.begin() as conn:
        context.configure(connection=conn, target_metadata=Base.metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()


if context.is_offline_mode():
    context.configure(url=_url(), target_metadata=Base.metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    run_migrations()
