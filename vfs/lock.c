/*
** lock.c -- the write lock of a depot database branch, and the
** locking_mode and journal_mode pragmas (vfs/lock.h).
**
** SQL it shapes:
**   PRAGMA locking_mode=EXCLUSIVE|NORMAL   noted, then run by SQLite
**   PRAGMA journal_mode=WAL                 answered as PRAGMA journal_mode
*/
#include "config.h"
#include "vfs/lock.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <string.h>

/* Append name z as a length byte and at most 255 of its bytes. */
static int lockPutName(unsigned char *a, const char *z){
  size_t n = strlen(z);
  if( n>255 ) n = 255;
  a[0] = (unsigned char)n;
  memcpy(a+1, z, n);
  return 1+(int)n;
}

void depot_lock_init(DepotLock *p, Store *pStore, uint64_t iBucket,
                     const char *zDb, const char *zBranch){
  int i, n = 0;
  memset(p, 0, sizeof(*p));
  p->pStore = pStore;
  p->aKey[n++] = 'W';
  for(i=7; i>=0; i--) p->aKey[n++] = (unsigned char)(iBucket>>(8*i));
  n += lockPutName(p->aKey+n, zDb);
  n += lockPutName(p->aKey+n, zBranch);
  p->nKey = n;
}

int depot_lock_acquire(DepotLock *p, char **pzErr){
  int rc;
  if( p->bHeld ) return SQLITE_OK;
  rc = store_writer_lock(p->pStore, p->aKey, p->nKey);
  if( rc==SQLITE_OK ){
    p->bHeld = 1;
  }else if( rc!=SQLITE_BUSY ){
    *pzErr = sqlite3_mprintf("depot: cannot take the write lock: %s",
                             store_errmsg(p->pStore));
  }
  return rc;
}

void depot_lock_release(DepotLock *p){
  if( p->bHeld ){
    store_writer_unlock(p->pStore, p->aKey, p->nKey);
    p->bHeld = 0;
  }
}

int depot_lock_other(DepotLock *p, int *pbOther, char **pzErr){
  int rc = store_writer_held(p->pStore, p->aKey, p->nKey, pbOther);
  if( rc!=SQLITE_OK ){
    *pzErr = sqlite3_mprintf("depot: cannot test the write lock: %s",
                             store_errmsg(p->pStore));
  }
  return rc;
}

/* True if zVal names WAL as SQLite's journal_mode pragma reads it: a
** non-empty prefix of "wal", in any case. */
static int lockNamesWal(const char *zVal){
  size_t n = zVal ? strlen(zVal) : 0;
  return n>0 && n<=3 && sqlite3_strnicmp(zVal, "wal", (int)n)==0;
}

int depot_lock_pragma(DepotLock *p, char **azArg){
  const char *zName = azArg[1];
  char *zVal = azArg[2];
  if( sqlite3_stricmp(zName, "locking_mode")==0 && zVal ){
    /* SQLite's own test of the value: exact words, any case */
    if( sqlite3_stricmp(zVal, "exclusive")==0 ) p->bExclusive = 1;
    if( sqlite3_stricmp(zVal, "normal")==0 ) p->bExclusive = 0;
  }else if( sqlite3_stricmp(zName, "journal_mode")==0 && lockNamesWal(zVal) ){
    /* The third element is SQLite's own copy of the value, which it reads
    ** after this call: "?" names no journal mode, and SQLite answers an
    ** unknown mode as a query.  Without this, SQLite would refuse WAL on
    ** a VFS without shared memory, as here, except in exclusive locking
    ** mode, where it would switch to an in-heap WAL. */
    zVal[0] = '?';
    zVal[1] = 0;
  }
  return SQLITE_NOTFOUND;
}
