## tests/bindings/ -- the product used from other languages' bindings.

# Python's standard sqlite3 module: a smoke of every feature family, and
# the key-version protocol as a caching application uses it (~5 s).
TESTS += tests/bindings/python_smoke.sh tests/bindings/python_kvversion_app.sh
EXTRA_DIST += tests/bindings/python_smoke.sh \
	tests/bindings/python_kvversion_app.sh tests/bindings/python_env.sh
