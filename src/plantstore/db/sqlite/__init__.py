"""SQLite, the embedded default: a connection factory, the group-commit writer, the write lock
several processes take in turns, online backups, and ``SQLiteDatabase``, which holds them for
the features' stores."""
