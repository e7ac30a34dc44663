## sql/ -- SQL text shipped with the product.
EXTRA_DIST += examples/quickstart.sql
# The reference entries of docs/SQL.md with their example SQL (make sql-doc).
EXTRA_DIST += sql/reference
