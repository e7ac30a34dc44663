/*
** name.c -- the names the `depot` program parses: STORE[:DB[@BRANCH]]
** targets (the one place that splits them) and --at points (a txid, an
** ISO-8601 time, a relative time such as -10m, or a restore point name).
*/
#include "config.h"
#include "ext/cli/cli.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/time.h>

/* Length of the "scheme://authority" prefix of z, or 0 when z is not a
** URL (a local path). */
static size_t nameUrlPrefix(const char *z){
  size_t i = 0;
  const char *zSlash;
  if( !isalpha((unsigned char)z[0]) ) return 0;
  while( isalnum((unsigned char)z[i]) || z[i]=='+' || z[i]=='-'
      || z[i]=='.' ){
    i++;
  }
  if( strncmp(z+i, "://", 3)!=0 ) return 0;
  zSlash = strchr(z+i+3, '/');
  return zSlash ? (size_t)(zSlash-z) : strlen(z);
}

int cli_store_is_file(const char *zStore){
  return nameUrlPrefix(zStore)==0;
}

void cli_target_free(CliTarget *t){
  sqlite3_free(t->zStore);
  sqlite3_free(t->zDb);
  sqlite3_free(t->zBranch);
  memset(t, 0, sizeof(*t));
}

/* A database NAME or BUCKET/NAME, or a branch name (bSlash 0): each part
** 1..255 bytes. */
static int nameOk(const char *z, int bSlash){
  const char *zSlash = bSlash ? strchr(z, '/') : 0;
  size_t n = strlen(z);
  if( zSlash ){
    return zSlash>z && (size_t)(zSlash-z)<=255 && nameOk(zSlash+1, 0)
        && strchr(zSlash+1, '/')==0;
  }
  return n>=1 && n<=255;
}

int cli_parse_target(const char *z, CliTarget *pOut, char **pzErr){
  size_t nPre = nameUrlPrefix(z);
  const char *zColon = strrchr(z+nPre, ':');
  const char *zAt = zColon ? strrchr(zColon, '@') : 0;
  memset(pOut, 0, sizeof(*pOut));
  if( zColon==0 ){
    pOut->zStore = sqlite3_mprintf("%s", z);
    pOut->zDb = sqlite3_mprintf("main");
  }else{
    pOut->zStore = sqlite3_mprintf("%.*s", (int)(zColon-z), z);
    if( zAt ){
      pOut->zDb = sqlite3_mprintf("%.*s", (int)(zAt-zColon-1), zColon+1);
    }else{
      pOut->zDb = sqlite3_mprintf("%s", zColon+1);
    }
  }
  pOut->zBranch = sqlite3_mprintf("%s", zAt ? zAt+1 : "main");
  if( pOut->zStore==0 || pOut->zDb==0 || pOut->zBranch==0 ){
    *pzErr = sqlite3_mprintf("out of memory");
  }else if( pOut->zStore[0]==0 ){
    *pzErr = sqlite3_mprintf("'%s' names no store: write STORE[:DB[@BRANCH]]",
                             z);
  }else if( !nameOk(pOut->zDb, 1) ){
    *pzErr = sqlite3_mprintf("'%s': the database after ':' must be NAME or"
        " BUCKET/NAME, each part 1..255 bytes (write STORE[:DB[@BRANCH]])",
        z);
  }else if( !nameOk(pOut->zBranch, 0) ){
    *pzErr = sqlite3_mprintf("'%s': the branch after '@' must be 1..255"
        " bytes (write STORE[:DB[@BRANCH]])", z);
  }else{
    return SQLITE_OK;
  }
  cli_target_free(pOut);
  return SQLITE_ERROR;
}

/* Seconds of a relative time "-N<unit>[N<unit>...]" (s m h d w), or -1
** if z is not one. */
static sqlite3_int64 nameRelative(const char *z){
  sqlite3_int64 nSec = 0;
  if( z[0]!='-' || z[1]==0 ) return -1;
  z++;
  while( *z ){
    sqlite3_int64 n = 0, nUnit;
    if( !isdigit((unsigned char)*z) ) return -1;
    while( isdigit((unsigned char)*z) ){
      n = n*10 + (*z++ - '0');
      if( n>100000000 ) return -1;
    }
    switch( *z++ ){
      case 's': nUnit = 1; break;
      case 'm': nUnit = 60; break;
      case 'h': nUnit = 3600; break;
      case 'd': nUnit = 86400; break;
      case 'w': nUnit = 604800; break;
      default: return -1;
    }
    nSec += n*nUnit;
  }
  return nSec;
}

int cli_bind_at(sqlite3_stmt *pStmt, int i, const char *z, char **pzErr){
  const char *s = z;
  sqlite3_int64 nSec;
  while( isdigit((unsigned char)*s) ) s++;
  if( *s==0 && s>z && s-z<=18 ){
    return sqlite3_bind_int64(pStmt, i, strtoll(z, 0, 10));
  }
  if( z[0]=='-' ){
    struct timeval tv;
    struct tm tm;
    time_t t;
    char zTime[64];
    if( (nSec = nameRelative(z))<0 ){
      *pzErr = sqlite3_mprintf("'%s' is not a relative time: write -N"
          "<unit>..., units s m h d w (-10m, -2h30m)", z);
      return SQLITE_ERROR;
    }
    gettimeofday(&tv, 0);
    t = tv.tv_sec - (time_t)nSec;
    gmtime_r(&t, &tm);
    strftime(zTime, 40, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(zTime+strlen(zTime), 24, ".%03dZ", (int)(tv.tv_usec/1000));
    return sqlite3_bind_text(pStmt, i, zTime, -1, SQLITE_TRANSIENT);
  }
  return sqlite3_bind_text(pStmt, i, z, -1, SQLITE_STATIC);
}
