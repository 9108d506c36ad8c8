"""Database infrastructure: connection pool, embedded server, migrations."""
