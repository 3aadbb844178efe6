"""Alembic environment: run the migrations on the URL the caller put in the config."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine
from sqlalchemy.pool import NullPool

url = context.config.get_main_option("sqlalchemy.url")
assert url is not None
engine = create_engine(url, poolclass=NullPool)
with engine.connect() as connection:
    context.configure(connection=connection, target_metadata=None, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()
engine.dispose()
