/*
** torture.h -- the simulated disk of the crash-torture runner
** (tests/torture/torture_io.c, used by tests/torture/torture.c only).
**
** Every file the workload touches goes through one of two test-only layers
** that share one op counter and one record of unsynced writes:
**   - a WalIo (tio_walio()) given to kv_engine_test_io(): the root WAL, the
**     KV catalog file and the kv_log files;
**   - a sqlite3_vfs named "torture" over "unix" (tio_vfs_register()),
**     registered as the default VFS: the kv_btree data file and the depot
**     store file with their SQLite -wal files.
**
** Power loss.  Each write remembers the bytes and the size it replaced until
** the file is synced.  Syncs are not passed to the disk (the runner itself
** decides what a power loss keeps, so real flushes would only cost time);
** a sync forgets the file's remembered writes: they are durable.  At crash
** point N (the Nth write or sync call, counted from tio_setup()), the Nth
** write is done (a sync is not), then for every file a random prefix of its
** unsynced writes is kept, the next one is torn (a random number of its
** 512-byte sectors kept), and the rest are undone, newest first; the
** process then ends with _exit(TIO_EXIT_CRASH).  Files are independent, so
** writes to two files may survive out of order, as on a real disk.  What is
** not simulated: loss of a file creation, rename or unlink whose directory
** was not synced (namespace operations are taken as durable at once).
**
** Faults.  tio_setup() may arm one fault: the nth call of one class
** (write, sync, read, open, truncate) fails once with EIO, ENOSPC, or - for
** writes - is cut short (half the bytes written).
**
** All functions are for one process; the layers are thread-safe (one mutex
** orders every counted call, so a crash sees a consistent set of writes).
*/
#ifndef DEPOT_TORTURE_H
#define DEPOT_TORTURE_H

#include "wal/wal.h"
#include <stdint.h>

#define TIO_WRITE    0
#define TIO_SYNC     1
#define TIO_READ     2
#define TIO_OPEN     3
#define TIO_TRUNCATE 4
#define TIO_NCLASS   5

#define TIO_EIO      1
#define TIO_ENOSPC   2
#define TIO_SHORT    3

#define TIO_EXIT_CRASH 86        /* exit status of a simulated power loss */

typedef struct TioConfig TioConfig;
struct TioConfig {
  uint64_t iCrashAt;      /* crash at this write/sync call; 0: never */
  uint64_t iSeed;         /* chooses what a crash keeps and tears */
  int eFaultClass;        /* TIO_WRITE..; with nFault>0 */
  uint64_t nFault;        /* the nth call of eFaultClass fails; 0: none */
  int eFaultKind;         /* TIO_EIO, TIO_ENOSPC, TIO_SHORT */
  int bLieSync;           /* self-check: a sync makes nothing durable */
};

/* Reset the counters and the unsynced-write record and apply *pCfg. */
void tio_setup(const TioConfig *pCfg);
/* Register the "torture" VFS as the default (once per process). */
int tio_vfs_register(void);
/* The WalIo of the simulated disk (static storage). */
const WalIo *tio_walio(void);
/* Calls seen so far of class eClass, and of writes+syncs together. */
uint64_t tio_count(int eClass);
uint64_t tio_count_ws(void);
/* True once the armed fault has fired. */
int tio_fault_fired(void);
/* Name of a class or kind, for messages. */
const char *tio_class_name(int eClass);
const char *tio_kind_name(int eKind);

#endif /* DEPOT_TORTURE_H */
