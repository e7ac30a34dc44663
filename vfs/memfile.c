/*
** memfile.c -- in-memory journals and temporary files that move to an
** anonymous temporary file past a bound (vfs/memfile.h).
*/
#include "config.h"
#include "vfs/memfile.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <string.h>

/* A journal or temporary file, in memory. */
typedef struct MemFile MemFile;
struct MemFile {
  sqlite3_file base;         /* must be first */
  unsigned char *a;
  sqlite3_int64 n, nAlloc;
  MemRollbackFn xRollback;   /* main journal: its database's, else NULL */
  void *pRollbackArg;
  int bSized;                /* the last call was xFileSize */
  sqlite3_vfs *pSpill;       /* VFS of the temporary file, NULL: none */
  sqlite3_file *pReal;       /* the temporary file once spilled, else NULL */
  unsigned char *aW;         /* spilled: writes not yet in pReal ... */
  sqlite3_int64 iW;          /* ... the bytes [iW, iW+nW) of the file */
  int nW;
  sqlite3_int64 nReal;       /* bytes pReal has been written or cut to */
};

/* A spilled file gathers adjacent writes (a journal record is three: page
** number, page, checksum) into one write of up to MEMFILE_WRITE_BYTES to
** its temporary file.  Those bytes go out before any read, truncation or
** write elsewhere; a failure to write them keeps them and is the error of
** the call that needed them out. */
#define MEMFILE_WRITE_BYTES (64*1024)

static int memFlush(MemFile *p){
  int rc;
  if( p->nW==0 ) return SQLITE_OK;
  rc = p->pReal->pMethods->xWrite(p->pReal, p->aW, p->nW, p->iW);
  if( rc==SQLITE_OK ){
    if( p->iW+p->nW > p->nReal ) p->nReal = p->iW+p->nW;
    p->nW = 0;
  }
  return rc;
}

/* Move the bytes to a temporary file of p->pSpill, in pieces of 64 KiB
** (the unix VFS writes at most 128 KiB per call).  Nonzero on success;
** on failure nothing changes and the bytes stay in memory. */
static int memSpill(MemFile *p){
  sqlite3_vfs *pVfs = p->pSpill;
  sqlite3_file *pReal;
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE
            | SQLITE_OPEN_EXCLUSIVE | SQLITE_OPEN_DELETEONCLOSE
            | SQLITE_OPEN_TEMP_JOURNAL;
  sqlite3_int64 iOff;
  int rc, nPiece = 0;
  pReal = sqlite3_malloc64(pVfs->szOsFile);
  if( pReal==0 ) return 0;
  memset(pReal, 0, pVfs->szOsFile);
  rc = pVfs->xOpen(pVfs, 0, pReal, flags, &flags);
  for(iOff=0; rc==SQLITE_OK && iOff<p->n; iOff+=nPiece){
    nPiece = p->n-iOff < 65536 ? (int)(p->n-iOff) : 65536;
    rc = pReal->pMethods->xWrite(pReal, p->a+iOff, nPiece, iOff);
  }
  if( rc!=SQLITE_OK ){
    if( pReal->pMethods ) pReal->pMethods->xClose(pReal);
    sqlite3_free(pReal);
    return 0;
  }
  sqlite3_free(p->a);
  p->a = 0;
  p->nAlloc = 0;
  p->pReal = pReal;
  p->aW = sqlite3_malloc64(MEMFILE_WRITE_BYTES);   /* NULL: writes go out */
  p->nW = 0;                                      /* one by one */
  p->nReal = p->n;
  return 1;
}

int memfile_spilled(sqlite3_file *pFile){
  return ((MemFile*)pFile)->pReal!=0;
}

/* The main journal is being closed, truncated or overwritten from its
** start: a rollback in progress is over. */
static void memEndRollback(MemFile *p){
  if( p->xRollback ) p->xRollback(p->pRollbackArg, 0);
}

static int memClose(sqlite3_file *pFile){
  MemFile *p = (MemFile*)pFile;
  memEndRollback(p);
  sqlite3_free(p->a);
  sqlite3_free(p->aW);                 /* the file goes: nothing to write */
  if( p->pReal ){
    p->pReal->pMethods->xClose(p->pReal);
    sqlite3_free(p->pReal);
  }
  return SQLITE_OK;
}

/* A ROLLBACK plays the main journal back (pager_playback) after looking
** for a super-journal name: the journal's size, then the 4 bytes 16 from
** its end, before any other read.  A ROLLBACK TO a savepoint plays records
** back too, from its first header at offset 0 when the savepoint opened
** the transaction, but never starts that way; it is no rollback of the
** transaction, and what it writes to the database is part of the next
** commit. */
static int memRead(sqlite3_file *pFile, void *pBuf, int iAmt,
                   sqlite3_int64 iOfst){
  MemFile *p = (MemFile*)pFile;
  if( p->xRollback && p->bSized && iAmt==4 && iOfst==p->n-16 ){
    p->xRollback(p->pRollbackArg, 1);
  }
  p->bSized = 0;
  if( p->pReal ){
    if( p->nW>0 && (iOfst+iAmt>p->iW || iOfst+iAmt>p->nReal) ){
      int rc = memFlush(p);
      if( rc!=SQLITE_OK ) return rc;
    }
    if( iOfst+iAmt > p->n ){
      sqlite3_int64 nHave = iOfst<p->n ? p->n-iOfst : 0;
      int rc = SQLITE_OK;
      if( nHave>0 ){
        rc = p->pReal->pMethods->xRead(p->pReal, pBuf, (int)nHave, iOfst);
      }
      memset((char*)pBuf+nHave, 0, (size_t)(iAmt-nHave));
      return rc==SQLITE_OK ? SQLITE_IOERR_SHORT_READ : rc;
    }
    return p->pReal->pMethods->xRead(p->pReal, pBuf, iAmt, iOfst);
  }
  if( iOfst+iAmt > p->n ){
    sqlite3_int64 nHave = iOfst<p->n ? p->n-iOfst : 0;
    if( nHave>0 ) memcpy(pBuf, p->a+iOfst, (size_t)nHave);
    memset((char*)pBuf+nHave, 0, (size_t)(iAmt-nHave));
    return SQLITE_IOERR_SHORT_READ;
  }
  memcpy(pBuf, p->a+iOfst, iAmt);
  return SQLITE_OK;
}

static int memWrite(sqlite3_file *pFile, const void *pBuf, int iAmt,
                    sqlite3_int64 iOfst){
  MemFile *p = (MemFile*)pFile;
  sqlite3_int64 nEnd = iOfst+iAmt;
  p->bSized = 0;
  if( iOfst==0 ) memEndRollback(p);
  if( p->pReal==0 && nEnd>MEMFILE_SPILL_BYTES && p->pSpill ) memSpill(p);
  if( p->pReal ){
    int rc = SQLITE_OK;
    if( p->aW && !(p->nW>0 && iOfst==p->iW+p->nW
                   && p->nW+iAmt<=MEMFILE_WRITE_BYTES) ){
      rc = memFlush(p);
      if( rc==SQLITE_OK ) p->iW = iOfst;
    }
    if( rc==SQLITE_OK ){
      if( p->aW && iAmt<=MEMFILE_WRITE_BYTES ){
        memcpy(p->aW+p->nW, pBuf, iAmt);
        p->nW += iAmt;
      }else{
        rc = p->pReal->pMethods->xWrite(p->pReal, pBuf, iAmt, iOfst);
        if( rc==SQLITE_OK && nEnd>p->nReal ) p->nReal = nEnd;
      }
    }
    if( rc==SQLITE_OK && nEnd>p->n ) p->n = nEnd;
    return rc;
  }
  if( nEnd > p->nAlloc ){
    sqlite3_int64 nNew = p->nAlloc ? p->nAlloc*2 : 65536;
    unsigned char *a;
    while( nNew<nEnd ) nNew *= 2;
    a = sqlite3_realloc64(p->a, nNew);
    if( a==0 ) return SQLITE_IOERR_NOMEM;
    p->a = a;
    p->nAlloc = nNew;
  }
  if( iOfst>p->n ) memset(p->a+p->n, 0, (size_t)(iOfst-p->n));
  memcpy(p->a+iOfst, pBuf, iAmt);
  if( nEnd>p->n ) p->n = nEnd;
  return SQLITE_OK;
}

static int memTruncate(sqlite3_file *pFile, sqlite3_int64 size){
  MemFile *p = (MemFile*)pFile;
  p->bSized = 0;
  if( size==0 ) memEndRollback(p);
  if( size<p->n ){
    if( p->pReal ){
      int rc = memFlush(p);
      if( rc==SQLITE_OK ) rc = p->pReal->pMethods->xTruncate(p->pReal, size);
      if( rc==SQLITE_OK ) p->n = p->nReal = size;
      return rc;
    }
    p->n = size;
  }
  return SQLITE_OK;
}
static int memSync(sqlite3_file *pFile, int flags){
  (void)pFile; (void)flags;
  return SQLITE_OK;
}
static int memFileSize(sqlite3_file *pFile, sqlite3_int64 *pSize){
  ((MemFile*)pFile)->bSized = 1;
  *pSize = ((MemFile*)pFile)->n;
  return SQLITE_OK;
}
static int memLock(sqlite3_file *pFile, int eLock){
  (void)pFile; (void)eLock;
  return SQLITE_OK;
}
static int memCheckReserved(sqlite3_file *pFile, int *pResOut){
  (void)pFile;
  *pResOut = 0;
  return SQLITE_OK;
}
static int memFileControl(sqlite3_file *pFile, int op, void *pArg){
  (void)pFile; (void)op; (void)pArg;
  return SQLITE_NOTFOUND;
}
static int memSectorSize(sqlite3_file *pFile){
  (void)pFile;
  return 512;
}
static int memDeviceCharacteristics(sqlite3_file *pFile){
  (void)pFile;
  return SQLITE_IOCAP_SAFE_APPEND | SQLITE_IOCAP_SEQUENTIAL
       | SQLITE_IOCAP_POWERSAFE_OVERWRITE;
}

static const sqlite3_io_methods memIoMethods = {
  1, memClose, memRead, memWrite, memTruncate, memSync, memFileSize,
  memLock, memLock, memCheckReserved, memFileControl, memSectorSize,
  memDeviceCharacteristics, 0, 0, 0, 0, 0, 0
};

int memfile_size(void){
  return (int)sizeof(MemFile);
}

void memfile_open(sqlite3_file *pFile, MemRollbackFn xRollback, void *pArg,
                  sqlite3_vfs *pSpill){
  MemFile *p = (MemFile*)pFile;
  p->pSpill = pSpill;
  p->xRollback = xRollback;
  p->pRollbackArg = pArg;
  pFile->pMethods = &memIoMethods;
}
