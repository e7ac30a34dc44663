## tests/bindings/ -- the product used from other languages' bindings.

# Python's standard sqlite3 module: a smoke of every feature family, and
# the key-version protocol as a caching application uses it (~5 s).
TESTS += tests/bindings/python_smoke.sh tests/bindings/python_kvversion_app.sh
EXTRA_DIST += tests/bindings/python_smoke.sh \
	tests/bindings/python_kvversion_app.sh tests/bindings/python_env.sh

# Node, better-sqlite3 12 (installed by bootstrap.sh into
# tests/bindings/node/node_modules): KV tables, a depot database opened
# through depot_default_vfs, a fork of it (~1 s; skips without node).
TESTS += tests/bindings/node_smoke.sh
EXTRA_DIST += tests/bindings/node_smoke.sh tests/bindings/node_smoke.cjs \
	tests/bindings/node/package.json
AM_TESTS_ENVIRONMENT += \
	DEPOT_NODE_MODULES='$(DEPOT_NODE_MODULES)'; export DEPOT_NODE_MODULES;
AM_DISTCHECK_CONFIGURE_FLAGS = \
	DEPOT_NODE_MODULES='$(abs_top_srcdir)/tests/bindings/node/node_modules'

# C: make install DESTDIR=<scratch>, then examples/c_example.c built with
# pkg-config --cflags --libs depot against what was installed (~3 s).
TESTS += tests/bindings/c_example.sh
EXTRA_DIST += tests/bindings/c_example.sh examples/c_example.c
AM_TESTS_ENVIRONMENT += \
	DEPOT_MAKE='$(MAKE)'; export DEPOT_MAKE; \
	DEPOT_TOP_BUILDDIR='$(abs_top_builddir)'; export DEPOT_TOP_BUILDDIR;
