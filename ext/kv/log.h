/*
** kv_log.h -- test hook of the kv_log backend (ext/kv_log.c; private to
** ext/ and the test suites).  The backend itself is reached through
** kvLogBackend (kv_backend.h) and the SQL module "kv_log".
*/
#ifndef DEPOT_KV_LOG_H
#define DEPOT_KV_LOG_H

#include <stdint.h>

/* kv_log tables opened from now on roll their log files past szFile bytes
** (and compact once that many bytes are dead), so tests see rolls and
** background compactions with little data.  0 restores the default. */
void kv_log_test_file_size(int64_t szFile);

#endif /* DEPOT_KV_LOG_H */
