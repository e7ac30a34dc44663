## ext/ -- extension entry point, SQL surface, KV engine.
include_HEADERS = ext/depot.h
DEPOT_SOURCES += \
	ext/depot.h \
	ext/depot_int.h \
	ext/depot.c \
	ext/version.c \
	ext/depot_sql.c
