"""PostgreSQL, for several processes and instances: ``PostgresDatabase`` holds the pool the
features' stores share and turns an outage into a 503."""
