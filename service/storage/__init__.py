"""Storage: records in SQLite and the spool of payloads and results."""
