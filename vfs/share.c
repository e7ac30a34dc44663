/*
** share.c -- one full pathname per depot database name, for SQLite's
** shared cache (vfs/share.h).
**
** The k-th name of a store the process sees (k = 0, 1, 2, ...) is spelled
** with k written in bijective base 2 as path elements inserted before the
** file name: digit 1 is "./", digit 2 is ".//" (an empty element), so k=0
** is the path itself, k=1 "dir/./store", k=2 "dir/.//store", k=3
** "dir/././store", and a thousand names of one store need at most 27 more
** bytes.  Both kinds of element mean nothing to the operating system, and
** SQLite's unix VFS drops them when it makes a full pathname.  The
** spellings given stay known for the life of the process (a hash table of
** the (path, name) pairs seen, and per path the next k).
*/
#include "config.h"
#include "vfs/share.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <pthread.h>
#include <stdint.h>
#include <string.h>

#define SHARE_NBUCKET 256

typedef struct ShareName ShareName;
struct ShareName {
  char *zKey;                /* path, NUL, bucket, 0x01, db, 0x01, branch */
  int nKey;
  int bPath;                 /* a path's own entry (zKey is the path) */
  uint64_t k;                /* a name: its number; a path: the next one */
  ShareName *pNext;
};

static pthread_mutex_t shareMutex = PTHREAD_MUTEX_INITIALIZER;
static ShareName *aShare[SHARE_NBUCKET];   /* guarded by shareMutex */

static unsigned shareHash(const char *z, int n, int bPath){
  uint32_t h = 2166136261u ^ (uint32_t)bPath;
  int i;
  for(i=0; i<n; i++){
    h ^= (unsigned char)z[i];
    h *= 16777619u;
  }
  return h % SHARE_NBUCKET;
}

/* The entry of key z (n bytes, bPath as above), made with k 0 if it is
** new (shareMutex held).  NULL when out of memory. */
static ShareName *shareFind(const char *z, int n, int bPath, int *pbNew){
  unsigned h = shareHash(z, n, bPath);
  ShareName *p;
  *pbNew = 0;
  for(p=aShare[h]; p; p=p->pNext){
    if( p->bPath==bPath && p->nKey==n && memcmp(p->zKey, z, n)==0 ) return p;
  }
  p = sqlite3_malloc64(sizeof(*p) + n);
  if( p==0 ) return 0;
  p->zKey = (char*)&p[1];
  memcpy(p->zKey, z, n);
  p->nKey = n;
  p->bPath = bPath;
  p->k = 0;
  p->pNext = aShare[h];
  aShare[h] = p;
  *pbNew = 1;
  return p;
}

/* Parameter zKey of the open: the name's own, else zDflt's, else "main". */
static const char *shareArg(const char *zName, const char *zDflt,
                            const char *zKey){
  const char *z = sqlite3_uri_parameter(zName, zKey);
  if( z==0 && zDflt ) z = sqlite3_uri_parameter(zDflt, zKey);
  return z ? z : "main";
}

/* The number of the name zKey (nKey bytes; its path first, up to a NUL),
** given now when it has none; -1 when out of memory. */
static int64_t shareNumber(const char *zKey, int nKey){
  ShareName *pName, *pPath;
  int64_t k = -1;
  int bNew;
  pthread_mutex_lock(&shareMutex);
  pName = shareFind(zKey, nKey, 0, &bNew);
  if( pName && !bNew ){
    k = (int64_t)pName->k;
  }else if( pName ){
    pPath = shareFind(zKey, (int)strlen(zKey), 1, &bNew);
    if( pPath ){
      pName->k = pPath->k++;
      k = (int64_t)pName->k;
    }else{
      pName->k = UINT64_MAX;      /* never matches a number given */
    }
  }
  pthread_mutex_unlock(&shareMutex);
  return k;
}

int depot_share_pathname(const char *zName, const char *zDflt, int nOut,
                         char *zOut){
  char *zIdent = sqlite3_mprintf("%s\x01%s\x01%s",
      shareArg(zName, zDflt, "bucket"), shareArg(zName, zDflt, "db"),
      shareArg(zName, zDflt, "branch"));
  size_t n = strlen(zOut), nIdent;
  char *zKey, *zSlash;
  char aTok[3*64];
  int nTok = 0;
  int64_t k;
  if( zIdent==0 ) return SQLITE_NOMEM;
  nIdent = strlen(zIdent);
  zKey = sqlite3_malloc64(n + 1 + nIdent);
  if( zKey==0 ){
    sqlite3_free(zIdent);
    return SQLITE_NOMEM;
  }
  memcpy(zKey, zOut, n+1);                  /* the path and its NUL */
  memcpy(zKey+n+1, zIdent, nIdent);
  k = shareNumber(zKey, (int)(n + 1 + nIdent));
  sqlite3_free(zKey);
  sqlite3_free(zIdent);
  if( k<0 ) return SQLITE_NOMEM;
  zSlash = strrchr(zOut, '/');
  if( k==0 || zSlash==0 ) return SQLITE_OK;
  while( k>0 ){                       /* bijective base 2, lowest first */
    int d = (int)((k-1)%2) + 1;
    k = (k-1)/2;
    aTok[nTok++] = '.';
    aTok[nTok++] = '/';
    if( d==2 ) aTok[nTok++] = '/';
  }
  if( n + (size_t)nTok + 1 > (size_t)nOut ) return SQLITE_CANTOPEN;
  memmove(zSlash+1+nTok, zSlash+1, strlen(zSlash+1)+1);
  memcpy(zSlash+1, aTok, nTok);
  return SQLITE_OK;
}
