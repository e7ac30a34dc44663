/*
** progress.c -- the progress hook of long store operations: a callback
** that the calling thread installs (depot_progress_set) and that
** depot_import/depot_export (ext/depot_sql.c), compaction, reclaim and
** verification (vfs/compact.c, gc.c, verify.c) call as they go, from the
** thread that runs them.  It is thread-local, so the background compactor
** and other threads never see another thread's hook.  A nonzero return of
** the callback asks the operation to stop: it then fails with
** SQLITE_INTERRUPT after undoing its unfinished part (see
** vfs/depot_vfs.h).  No hook installed: the operations run as without one.
*/
#include "config.h"
#include "vfs/depot_vfs.h"

#include <stddef.h>

static __thread DepotProgressFn xDepotProgress = 0;
static __thread void *pDepotProgressArg = 0;

void depot_progress_set(DepotProgressFn xFn, void *pArg){
  xDepotProgress = xFn;
  pDepotProgressArg = xFn ? pArg : 0;
}

int depot_progress_active(void){
  return xDepotProgress!=0;
}

int depot_progress_report(const char *zWhat, int64_t nDone, int64_t nTotal,
                          int64_t nBytes){
  if( xDepotProgress==0 ) return 0;
  return xDepotProgress(pDepotProgressArg, zWhat, nDone, nTotal, nBytes)!=0;
}
