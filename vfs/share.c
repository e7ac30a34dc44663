/*
** share.c -- one full pathname per depot database name, for SQLite's
** shared cache (vfs/share.h).
**
** The spellings given are kept in a list for the life of the process, one
** entry per (store path, name) seen: a handful in any real program.
*/
#include "config.h"
#include "vfs/share.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <pthread.h>
#include <string.h>

typedef struct ShareName ShareName;
struct ShareName {
  char *zPath;               /* the store's full pathname */
  char *zIdent;              /* bucket, db and branch, 0x01 between */
  int nDot;                  /* "./" inserted before the file name */
  ShareName *pNext;
};

static pthread_mutex_t shareMutex = PTHREAD_MUTEX_INITIALIZER;
static ShareName *pShareNames = 0;         /* guarded by shareMutex */

/* Parameter zKey of the open: the name's own, else zDflt's, else "main". */
static const char *shareArg(const char *zName, const char *zDflt,
                            const char *zKey){
  const char *z = sqlite3_uri_parameter(zName, zKey);
  if( z==0 && zDflt ) z = sqlite3_uri_parameter(zDflt, zKey);
  return z ? z : "main";
}

/* The number of "./" of (zPath, zIdent), given now if it has none: one more
** than the names of zPath seen before it.  -1 when out of memory. */
static int shareDots(const char *zPath, const char *zIdent){
  ShareName *p;
  int nSeen = 0, nDot = -1;
  pthread_mutex_lock(&shareMutex);
  for(p=pShareNames; p; p=p->pNext){
    if( strcmp(p->zPath, zPath)!=0 ) continue;
    if( strcmp(p->zIdent, zIdent)==0 ){
      nDot = p->nDot;
      break;
    }
    nSeen++;
  }
  if( p==0 && (p = sqlite3_malloc64(sizeof(*p)))!=0 ){
    p->zPath = sqlite3_mprintf("%s", zPath);
    p->zIdent = sqlite3_mprintf("%s", zIdent);
    if( p->zPath && p->zIdent ){
      p->nDot = nDot = nSeen;
      p->pNext = pShareNames;
      pShareNames = p;
    }else{
      sqlite3_free(p->zPath);
      sqlite3_free(p->zIdent);
      sqlite3_free(p);
    }
  }
  pthread_mutex_unlock(&shareMutex);
  return nDot;
}

int depot_share_pathname(const char *zName, const char *zDflt, int nOut,
                         char *zOut){
  char *zIdent = sqlite3_mprintf("%s\x01%s\x01%s",
      shareArg(zName, zDflt, "bucket"), shareArg(zName, zDflt, "db"),
      shareArg(zName, zDflt, "branch"));
  char *zSlash;
  size_t n;
  int nDot;
  if( zIdent==0 ) return SQLITE_NOMEM;
  nDot = shareDots(zOut, zIdent);
  sqlite3_free(zIdent);
  if( nDot<0 ) return SQLITE_NOMEM;
  zSlash = strrchr(zOut, '/');
  if( nDot==0 || zSlash==0 ) return SQLITE_OK;
  n = strlen(zOut);
  if( n + 2*(size_t)nDot + 1 > (size_t)nOut ) return SQLITE_CANTOPEN;
  memmove(zSlash+1+2*nDot, zSlash+1, strlen(zSlash+1)+1);
  while( nDot-- > 0 ){
    zSlash[1+2*nDot] = '.';
    zSlash[2+2*nDot] = '/';
  }
  return SQLITE_OK;
}
