"""The trajectory store: SQLAlchemy models, sessions and migrations, a batched idempotent writer and the
dashboard's query API. Import from the submodules (models, session, writer, query, runs)."""
