/*
** fuzz_wal_record.c -- fuzz target for the root WAL's record decoder and
** frame scanner (wal/record.c, wal/segment.c).
**
** The input is used twice: as a record body for wal_record_decode(), and
** as the frame area of a segment file that wal_scan_next() walks.  A body
** that decodes is rebuilt with the record builder and must encode to the
** same bytes (the decoder accepts exactly what the builder writes); every
** frame the scanner accepts must have a CRC that matches and a body that
** lies inside the input.
*/
#define _GNU_SOURCE 1          /* memfd_create */
#include "config.h"
#include "tests/fuzz/fuzz.h"
#include "wal/wal_int.h"
#include <sqlite3.h>

#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Rebuild pRec with the builder; its frame body must equal a[0..n). */
static void fuzzWalRebuild(const WalRecord *pRec, const uint8_t *a, size_t n){
  WalRecordBuilder *pB = wal_record_new(pRec->tid);
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
    FUZZ_CHECK( nFrame==WAL_FRAME_HDR+n );
    FUZZ_CHECK( memcmp(aFrame+WAL_FRAME_HDR, a, n)==0 );
    FUZZ_CHECK( wal_frame_crc_ok(aFrame, aFrame+WAL_FRAME_HDR, n)!=0 );
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
    fuzzWalRebuild(pRec, a, n);
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
