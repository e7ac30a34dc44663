/*
** fuzz_wal_record.c -- fuzz target for the root WAL's record decoder and
** frame scanner (wal/record.c, wal/segment.c).
**
** The input is used twice: as a record body for wal_record_decode(), and
** as the frame area of a segment file that wal_scan_next() walks.  A body
** that decodes is rebuilt with the record builder, whose frame must carry
** a good CRC and decode to the same record (the bytes may differ: the
** decoder also takes varints that are longer than needed); every
** frame the scanner accepts must have a CRC that matches and a body that
** lies inside the input.  Abort records (no tables, the CID they
** withdraw) are rebuilt with the abort builder.
*/
#define _GNU_SOURCE 1          /* memfd_create */
#include "config.h"
#include "tests/fuzz/fuzz.h"
#include "wal/wal_int.h"
#include <sqlite3.h>

#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* 1 if records p and q hold the same CID, TID, tables and actions. */
static int fuzzWalSame(const WalRecord *p, const WalRecord *q){
  int t, k;
  if( p->cid!=q->cid || p->tid!=q->tid || p->nTable!=q->nTable
   || p->cidAborted!=q->cidAborted ) return 0;
  for(t=0; t<p->nTable; t++){
    const WalTableActions *a = &p->aTable[t], *b = &q->aTable[t];
    if( a->nTable!=b->nTable || memcmp(a->zTable, b->zTable, a->nTable)
     || a->nAction!=b->nAction ) return 0;
    for(k=0; k<a->nAction; k++){
      const WalAction *x = &a->aAction[k], *y = &b->aAction[k];
      if( x->bDelete!=y->bDelete || x->nKey!=y->nKey || x->nVal!=y->nVal
       || (x->nKey && memcmp(x->aKey, y->aKey, x->nKey))
       || (x->nVal && memcmp(x->aVal, y->aVal, x->nVal)) ) return 0;
    }
  }
  return 1;
}

/* Rebuild pRec with the builder; its frame must decode to pRec again and
** be no longer than the n bytes pRec came from. */
static void fuzzWalRebuild(const WalRecord *pRec, size_t n){
  WalRecordBuilder *pB = pRec->cidAborted
      ? wal_record_abort_new(pRec->tid, pRec->cidAborted)
      : wal_record_new(pRec->tid);
  WalRecord *pAgain = 0;
  uint8_t *aFrame;
  size_t nFrame;
  int t, k;
  if( pB==0 ) return;
  for(t=0; t<pRec->nTable; t++){
    const WalTableActions *pT = &pRec->aTable[t];
    /* A repeated table name is MISUSE for the builder: not rebuildable. */
    if( wal_record_table(pB, pT->zTable, pT->nTable)!=SQLITE_OK ) goto done;
    for(k=0; k<pT->nAction; k++){
      const WalAction *pA = &pT->aAction[k];
      FUZZ_CHECK( wal_record_action(pB, pA->bDelete, pA->aKey, pA->nKey,
                                    pA->aVal, pA->nVal)==SQLITE_OK );
    }
  }
  nFrame = wal_frame_size(pB, pRec->cid);
  aFrame = malloc(nFrame);
  if( aFrame ){
    wal_frame_encode(pB, pRec->cid, aFrame);
    FUZZ_CHECK( nFrame<=WAL_FRAME_HDR+n );
    FUZZ_CHECK( wal_frame_crc_ok(aFrame, aFrame+WAL_FRAME_HDR,
                                 nFrame-WAL_FRAME_HDR)!=0 );
    FUZZ_CHECK( wal_record_decode(aFrame+WAL_FRAME_HDR, nFrame-WAL_FRAME_HDR,
                                  &pAgain)==SQLITE_OK );
    FUZZ_CHECK( fuzzWalSame(pRec, pAgain) );
    sqlite3_free(pAgain);
    free(aFrame);
  }
done:
  wal_record_free(pB);
}

static void fuzzWalDecode(const uint8_t *a, size_t n){
  WalRecord *pRec = 0;
  int rc = wal_record_decode(a, n, &pRec);
  if( rc==SQLITE_OK ){
    FUZZ_CHECK( pRec!=0 && pRec->cid!=0 );
    fuzzWalRebuild(pRec, n);
    sqlite3_free(pRec);
  }else{
    FUZZ_CHECK( pRec==0 && (rc==SQLITE_CORRUPT || rc==SQLITE_NOMEM) );
  }
}

/* Scan a[0..n) as the frames of a segment held in an anonymous file. */
static void fuzzWalScan(const uint8_t *a, size_t n){
  int fd = memfd_create("fuzz-wal", 0);
  WalScan s;
  const uint8_t *aBody;
  size_t nBody;
  uint64_t iFrame, iPrev = 0;
  const char *zWhy;
  int rc, bFirst = 1;
  if( fd<0 ) return;
  if( n==0 || write(fd, a, n)==(ssize_t)n ){
    wal_scan_init(&s, wal_io_posix(), fd, "fuzz", 0, n);
    while( (rc = wal_scan_next(&s, &aBody, &nBody, &iFrame, &zWhy))==SQLITE_ROW ){
      FUZZ_CHECK( iFrame+WAL_FRAME_HDR+nBody<=n );
      FUZZ_CHECK( bFirst || iFrame>iPrev );
      FUZZ_CHECK( memcmp(aBody, a+iFrame+WAL_FRAME_HDR, nBody)==0 );
      FUZZ_CHECK( wal_frame_crc_ok(a+iFrame, aBody, nBody)!=0 );
      fuzzWalDecode(aBody, nBody);
      iPrev = iFrame;
      bFirst = 0;
    }
    FUZZ_CHECK( rc==SQLITE_DONE || rc==SQLITE_CORRUPT || rc==SQLITE_NOMEM );
    if( rc==SQLITE_CORRUPT ) FUZZ_CHECK( zWhy!=0 && iFrame<n );
    wal_scan_finish(&s);
  }
  close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *aData, size_t nData){
  fuzzWalDecode(aData, nData);
  fuzzWalScan(aData, nData);
  return 0;
}
