"""The run/attempt index: one schema, SQLite (embedded) and DynamoDB backends."""
