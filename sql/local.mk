## sql/ -- SQL text shipped with the product.
EXTRA_DIST += examples/quickstart.sql
