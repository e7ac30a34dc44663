/*
** check_wal.c -- the "wal" suite: the root write-ahead log of wal/.
**
** Record encoding and the hostile-input decoder, segment scanning (torn
** tails, bad CRCs, corruption in older segments), rotation, retirement
** order and .bak mode, replay and confirmation, CID persistence, group
** commit from many threads (and how its waiters spin or sleep), injected
** I/O faults, a SIGKILL test (DEPOT_TORTURE_ITERS=n runs n kills instead
** of the short smoke), following the log between positions another writer
** published, and the shared header (across processes).
*/
#include "config.h"
#include "tests/check/harness.h"
#include "wal/wal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------- helpers */

/* Bytes of a segment header (format in wal/segment.c); frames follow. */
#define TW_SEG_HDR 48

static Wal *tw_open_cfg(const char *zDir, int64_t szSeg, int bBak,
                        const WalIo *pIo){
  WalConfig cfg;
  Wal *pWal = 0;
  char *zErr = 0;
  int rc;
  memset(&cfg, 0, sizeof(cfg));
  cfg.szSegment = szSeg;
  cfg.bKeepBak = bBak;
  cfg.pIo = pIo;
  rc = wal_open(zDir, &cfg, &pWal, &zErr);
  ck_assert_msg(rc==SQLITE_OK, "wal_open %s: rc=%d %s", zDir, rc,
                zErr ? zErr : "");
  ck_assert_ptr_nonnull(pWal);
  return pWal;
}

static Wal *tw_open(const char *zDir){
  return tw_open_cfg(zDir, 0, 0, 0);
}

/* A record of one table zTable with one put zKey=zVal. */
static WalRecordBuilder *tw_rec(uint64_t tid, const char *zTable,
                                const char *zKey, const char *zVal){
  WalRecordBuilder *p = wal_record_new(tid);
  ck_assert_ptr_nonnull(p);
  ck_assert_int_eq(wal_record_table(p, zTable, (int)strlen(zTable)),
                   SQLITE_OK);
  ck_assert_int_eq(wal_record_action(p, 0, zKey, (int)strlen(zKey),
                                     zVal, (int)strlen(zVal)), SQLITE_OK);
  return p;
}

/* Appends a one-put record waiting for zTable (or nothing when NULL). */
static uint64_t tw_append(Wal *pWal, uint64_t tid, const char *zTable,
                          const char *zKey, const char *zVal, int bPending){
  WalRecordBuilder *pRec = tw_rec(tid, zTable, zKey, zVal);
  const char *az[1];
  int an[1];
  uint64_t cid = 0;
  char *zErr = 0;
  int rc;
  az[0] = zTable;
  an[0] = (int)strlen(zTable);
  rc = wal_append(pWal, pRec, bPending ? 1 : 0, az, an, &cid, &zErr);
  ck_assert_msg(rc==SQLITE_OK, "wal_append: rc=%d %s", rc, zErr ? zErr : "");
  wal_record_free(pRec);
  return cid;
}

/* What a replay saw: CIDs, TIDs and the first key of each record. */
#define TW_MAX_SEEN 20000
typedef struct TwSeen TwSeen;
struct TwSeen {
  int n;
  uint64_t aCid[TW_MAX_SEEN];
  uint64_t aTid[TW_MAX_SEEN];
  char azKey[TW_MAX_SEEN][24];
  int nTable[TW_MAX_SEEN];
  Wal *pConfirm;             /* non-NULL: confirm each record */
  int rcStopAt;              /* stop with SQLITE_ABORT at this count */
};

static int tw_collect(void *pCtx, const WalRecord *pRec){
  TwSeen *s = (TwSeen*)pCtx;
  ck_assert_int_lt(s->n, TW_MAX_SEEN);
  if( s->rcStopAt && s->n==s->rcStopAt ) return SQLITE_ABORT;
  s->aCid[s->n] = pRec->cid;
  s->aTid[s->n] = pRec->tid;
  s->nTable[s->n] = pRec->nTable;
  s->azKey[s->n][0] = 0;
  if( pRec->nTable>0 && pRec->aTable[0].nAction>0 ){
    const WalAction *a = &pRec->aTable[0].aAction[0];
    int n = a->nKey < 23 ? a->nKey : 23;
    memcpy(s->azKey[s->n], a->aKey, n);
    s->azKey[s->n][n] = 0;
  }
  s->n++;
  if( s->pConfirm ){
    ck_assert_int_eq(wal_confirm_record(s->pConfirm, pRec->cid), SQLITE_OK);
  }
  return SQLITE_OK;
}

static TwSeen *tw_replay(Wal *pWal, int bConfirm){
  TwSeen *s = sqlite3_malloc64(sizeof(TwSeen));
  char *zErr = 0;
  int rc;
  ck_assert_ptr_nonnull(s);
  memset(s, 0, sizeof(*s));
  if( bConfirm ) s->pConfirm = pWal;
  rc = wal_replay(pWal, tw_collect, s, &zErr);
  ck_assert_msg(rc==SQLITE_OK, "wal_replay: rc=%d %s", rc, zErr ? zErr : "");
  return s;
}

static char *tw_seg_path(const char *zDir, uint64_t segno){
  return sqlite3_mprintf("%s/wal/%016llu.log", zDir,
                         (unsigned long long)segno);
}

static int tw_exists(const char *zPath){
  struct stat st;
  return stat(zPath, &st)==0;
}

static off_t tw_size(const char *zPath){
  struct stat st;
  ck_assert_msg(stat(zPath, &st)==0, "stat %s", zPath);
  return st.st_size;
}

/* Overwrites one byte of a file. */
static void tw_poke(const char *zPath, off_t off, int delta){
  int fd = open(zPath, O_RDWR);
  unsigned char c;
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(pread(fd, &c, 1, off), 1);
  c = (unsigned char)(c + delta);
  ck_assert_int_eq(pwrite(fd, &c, 1, off), 1);
  close(fd);
}

/* A frame of a small valid record, encoded through a real log, read back
** as the body bytes (the frame minus its 8-byte header). */
static uint8_t *tw_sample_body(size_t *pn){
  char *zDir = th_tmpdir("walbody");
  Wal *pWal = tw_open(zDir);
  WalRecordBuilder *pRec = wal_record_new(77);
  char *zPath;
  uint8_t *a;
  uint64_t cid;
  const char *az[1] = {"t1"};
  int an[1] = {2};
  off_t sz;
  int fd;
  wal_record_table(pRec, "t1", 2);
  wal_record_action(pRec, 0, "k1", 2, "value-1", 7);
  wal_record_action(pRec, 1, "k2", 2, 0, 0);
  wal_record_table(pRec, "table-two", 9);
  wal_record_action(pRec, 0, "", 0, "", 0);
  ck_assert_int_eq(wal_append(pWal, pRec, 1, az, an, &cid, 0), SQLITE_OK);
  wal_record_free(pRec);
  wal_close(pWal);                         /* trims the padding */
  zPath = tw_seg_path(zDir, 1);
  sz = tw_size(zPath);
  a = sqlite3_malloc64(sz);
  fd = open(zPath, O_RDONLY);
  ck_assert_int_eq(pread(fd, a, sz, 0), sz);
  close(fd);
  *pn = (size_t)(sz - TW_SEG_HDR - 8);
  memmove(a, a+TW_SEG_HDR+8, *pn);
  sqlite3_free(zPath);
  sqlite3_free(zDir);
  return a;
}

static Wal *tw_five(const char *zDir){
  Wal *pWal = tw_open(zDir);
  int i;
  for(i=0; i<5; i++){
    char zKey[16];
    snprintf(zKey, sizeof(zKey), "k%d", i+1);
    tw_append(pWal, i, "t", zKey, "value", 1);
  }
  return pWal;
}

/* ------------------------------------------------------------- records */

START_TEST(test_wal_record_round_trip){
  WalRecordBuilder *p = wal_record_new(12345);
  char *zDir = th_tmpdir("walrt");
  Wal *pWal = tw_open(zDir);
  const char *az[1] = {"alpha"};
  int an[1] = {5};
  uint64_t cid = 0;
  TwSeen *s;
  ck_assert_int_eq(wal_record_ntable(p), 0);
  ck_assert_int_eq(wal_record_table(p, "alpha", 5), SQLITE_OK);
  ck_assert_int_eq(wal_record_action(p, 0, "key", 3, "", 0), SQLITE_OK);
  ck_assert_int_eq(wal_record_action(p, 0, "", 0, "v", 1), SQLITE_OK);
  ck_assert_int_eq(wal_record_table(p, "beta", 4), SQLITE_OK);
  ck_assert_int_eq(wal_record_action(p, 1, "gone", 4, 0, 0), SQLITE_OK);
  ck_assert_int_eq(wal_record_ntable(p), 2);
  ck_assert_int_eq(wal_append(pWal, p, 1, az, an, &cid, 0), SQLITE_OK);
  ck_assert_uint_eq(cid, 1);
  wal_record_free(p);
  wal_close(pWal);
  pWal = tw_open(zDir);
  s = tw_replay(pWal, 0);
  ck_assert_int_eq(s->n, 1);
  ck_assert_uint_eq(s->aTid[0], 12345);
  ck_assert_int_eq(s->nTable[0], 2);
  ck_assert_str_eq(s->azKey[0], "key");
  sqlite3_free(s);
  wal_close(pWal);
  sqlite3_free(zDir);
}
END_TEST

/* Decodes a body built directly and checks every field. */
START_TEST(test_wal_record_decode_fields){
  size_t n;
  uint8_t *a = tw_sample_body(&n);
  WalRecord *pRec = 0;
  ck_assert_int_eq(wal_record_decode(a, n, &pRec), SQLITE_OK);
  ck_assert_uint_eq(pRec->cid, 1);
  ck_assert_uint_eq(pRec->tid, 77);
  ck_assert_int_eq(pRec->nTable, 2);
  ck_assert_int_eq(pRec->aTable[0].nTable, 2);
  ck_assert_int_eq(memcmp(pRec->aTable[0].zTable, "t1", 2), 0);
  ck_assert_int_eq(pRec->aTable[0].nAction, 2);
  ck_assert_int_eq(pRec->aTable[0].aAction[0].bDelete, 0);
  ck_assert_int_eq(pRec->aTable[0].aAction[0].nVal, 7);
  ck_assert_int_eq(memcmp(pRec->aTable[0].aAction[0].aVal, "value-1", 7), 0);
  ck_assert_int_eq(pRec->aTable[0].aAction[1].bDelete, 1);
  ck_assert_ptr_null(pRec->aTable[0].aAction[1].aVal);
  ck_assert_int_eq(pRec->aTable[0].aAction[1].nVal, 0);
  ck_assert_int_eq(pRec->aTable[1].nTable, 9);
  ck_assert_int_eq(pRec->aTable[1].nAction, 1);
  ck_assert_int_eq(pRec->aTable[1].aAction[0].nKey, 0);
  ck_assert_int_eq(pRec->aTable[1].aAction[0].nVal, 0);
  sqlite3_free(pRec);
  sqlite3_free(a);
}
END_TEST

START_TEST(test_wal_record_many_tables){
  WalRecordBuilder *p = wal_record_new(9);
  char *zDir = th_tmpdir("walmany");
  Wal *pWal = tw_open(zDir);
  const char *az[1] = {"table-7"};
  int an[1] = {7};
  uint64_t cid;
  TwSeen *s;
  int i;
  for(i=0; i<500; i++){
    char zName[32];
    int n = snprintf(zName, sizeof(zName), "table-%d", i);
    ck_assert_int_eq(wal_record_table(p, zName, n), SQLITE_OK);
    ck_assert_int_eq(wal_record_action(p, i%2, zName, n, "x", 1), SQLITE_OK);
  }
  ck_assert_int_eq(wal_record_ntable(p), 500);
  ck_assert_int_eq(wal_append(pWal, p, 1, az, an, &cid, 0), SQLITE_OK);
  wal_record_free(p);
  wal_close(pWal);
  pWal = tw_open(zDir);
  s = tw_replay(pWal, 0);
  ck_assert_int_eq(s->n, 1);
  ck_assert_int_eq(s->nTable[0], 500);
  sqlite3_free(s);
  wal_close(pWal);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_wal_record_builder_rejects_misuse){
  WalRecordBuilder *p = wal_record_new(1);
  ck_assert_int_eq(wal_record_action(p, 0, "k", 1, "v", 1), SQLITE_MISUSE);
  ck_assert_int_eq(wal_record_table(p, "t", 0), SQLITE_MISUSE);
  ck_assert_int_eq(wal_record_table(p, 0, 3), SQLITE_MISUSE);
  ck_assert_int_eq(wal_record_table(p, "t", 1), SQLITE_OK);
  ck_assert_int_eq(wal_record_table(p, "t", 1), SQLITE_MISUSE);
  ck_assert_int_eq(wal_record_action(p, 0, 0, 4, "v", 1), SQLITE_MISUSE);
  ck_assert_int_eq(wal_record_action(p, 0, "k", -1, "v", 1), SQLITE_MISUSE);
  ck_assert_int_eq(wal_record_action(p, 0, "k", 1, 0, 5), SQLITE_MISUSE);
  ck_assert_int_eq(wal_record_action(p, 1, "k", 1, 0, 5), SQLITE_OK);
  ck_assert_int_eq(wal_record_ntable(p), 1);
  wal_record_free(p);
  wal_record_free(0);
}
END_TEST

START_TEST(test_wal_decode_truncated_is_corrupt){
  size_t n, k;
  uint8_t *a = tw_sample_body(&n);
  for(k=0; k<n; k++){
    WalRecord *pRec = (WalRecord*)1;
    uint8_t *b = sqlite3_malloc64(k ? k : 1);   /* exact size for ASan */
    memcpy(b, a, k);
    ck_assert_msg(wal_record_decode(b, k, &pRec)==SQLITE_CORRUPT,
                  "truncated to %d bytes", (int)k);
    ck_assert_ptr_null(pRec);
    sqlite3_free(b);
  }
  sqlite3_free(a);
}
END_TEST

START_TEST(test_wal_decode_byte_flips_never_crash){
  size_t n, k;
  uint8_t *a = tw_sample_body(&n);
  uint8_t *b = sqlite3_malloc64(n);
  int d, nOk = 0, nCorrupt = 0;
  static const int aDelta[] = {1, 0x80, 0x7f, 0xff, 0x40};
  for(k=0; k<n; k++){
    for(d=0; d<(int)(sizeof(aDelta)/sizeof(aDelta[0])); d++){
      WalRecord *pRec = 0;
      int rc;
      memcpy(b, a, n);
      b[k] = (uint8_t)(b[k] + aDelta[d]);
      rc = wal_record_decode(b, n, &pRec);
      ck_assert(rc==SQLITE_OK || rc==SQLITE_CORRUPT);
      if( rc==SQLITE_OK ){
        int t, i;
        nOk++;
        /* every pointer stays inside the body */
        for(t=0; t<pRec->nTable; t++){
          const WalTableActions *pT = &pRec->aTable[t];
          ck_assert((const uint8_t*)pT->zTable>=b);
          ck_assert((const uint8_t*)pT->zTable+pT->nTable<=b+n);
          for(i=0; i<pT->nAction; i++){
            ck_assert(pT->aAction[i].aKey+pT->aAction[i].nKey<=b+n);
          }
        }
        sqlite3_free(pRec);
      }else{
        nCorrupt++;
      }
    }
  }
  ck_assert_int_gt(nCorrupt, 0);
  ck_assert_int_gt(nOk, 0);   /* e.g. flips inside key bytes stay valid */
  sqlite3_free(b);
  sqlite3_free(a);
}
END_TEST

/* A record that names no table (cid 0x24, tid 0x3d, 0 tables) decodes to
** an empty record; found by the wal_record fuzz target, whose UBSan run
** reported pointer arithmetic on the NULL table array. */
START_TEST(test_wal_decode_record_of_no_tables){
  static const uint8_t a[] = {0x24, 0x3d, 0x00};
  WalRecord *pRec = 0;
  ck_assert_int_eq(wal_record_decode(a, sizeof(a), &pRec), SQLITE_OK);
  ck_assert_ptr_nonnull(pRec);
  ck_assert_uint_eq(pRec->cid, 0x24);
  ck_assert_uint_eq(pRec->tid, 0x3d);
  ck_assert_int_eq(pRec->nTable, 0);
  ck_assert_ptr_null(pRec->aTable);
  sqlite3_free(pRec);
}
END_TEST

/* Hostile lengths: huge counts never lead to big allocations. */
START_TEST(test_wal_decode_hostile_counts){
  /* cid=1 tid=1 nTable=2^63 */
  static const uint8_t a1[] = {1, 1, 0xff,0xff,0xff,0xff,0xff,0xff,0xff,
                               0xff,0x7f};
  /* one table "t" with nAction=0xffffffff and nothing after */
  static const uint8_t a2[] = {1, 1, 1, 1, 't', 0xff,0xff,0xff,0xff};
  /* a key length of 2^62 */
  static const uint8_t a3[] = {1, 1, 1, 1, 't', 1,0,0,0, 0,
                               0xff,0xff,0xff,0xff,0xff,0xff,0xff,0xff,0x3f};
  /* an 11-byte varint */
  static const uint8_t a4[] = {0x80,0x80,0x80,0x80,0x80,0x80,0x80,0x80,
                               0x80,0x80,0x01};
  /* cid 0 */
  static const uint8_t a5[] = {0, 1, 0};
  WalRecord *pRec = 0;
  ck_assert_int_eq(wal_record_decode(a1, sizeof(a1), &pRec), SQLITE_CORRUPT);
  ck_assert_int_eq(wal_record_decode(a2, sizeof(a2), &pRec), SQLITE_CORRUPT);
  ck_assert_int_eq(wal_record_decode(a3, sizeof(a3), &pRec), SQLITE_CORRUPT);
  ck_assert_int_eq(wal_record_decode(a4, sizeof(a4), &pRec), SQLITE_CORRUPT);
  ck_assert_int_eq(wal_record_decode(a5, sizeof(a5), &pRec), SQLITE_CORRUPT);
  ck_assert_int_eq(wal_record_decode(a5, 0, &pRec), SQLITE_CORRUPT);
  ck_assert_ptr_null(pRec);
}
END_TEST

START_TEST(test_wal_crc32c_known_values){
  /* RFC 3720 B.4 test vectors */
  uint8_t a[32];
  memset(a, 0, sizeof(a));
  ck_assert_uint_eq(wal_crc32c(0, a, 32), 0x8A9136AA);
  memset(a, 0xff, sizeof(a));
  ck_assert_uint_eq(wal_crc32c(0, a, 32), 0x62A8AB43);
  ck_assert_uint_eq(wal_crc32c(0, "123456789", 9), 0xE3069283);
  /* continuation equals one pass */
  ck_assert_uint_eq(wal_crc32c(wal_crc32c(0, "1234", 4), "56789", 5),
                    0xE3069283);
}
END_TEST

/* Every length and alignment gives the bitwise CRC-32C (the hardware path
** and the table path both handle unaligned heads and short tails): _i==0
** the path the CPU picks, _i==1 the table path forced. */
START_TEST(test_wal_crc32c_matches_bitwise_at_every_length_and_offset){
  uint8_t a[160];
  int i, iOff, n;
  wal_crc32c_test_table(_i==1);
  for(i=0; i<(int)sizeof(a); i++) a[i] = (uint8_t)(i*131 + 7);
  for(iOff=0; iOff<8; iOff++){
    for(n=0; n+iOff<=(int)sizeof(a) && n<=150; n++){
      uint32_t c = 0xffffffffu;
      int j, k;
      for(j=0; j<n; j++){
        c ^= a[iOff+j];
        for(k=0; k<8; k++) c = (c>>1) ^ (0x82F63B78u & (0u - (c & 1)));
      }
      ck_assert_uint_eq(wal_crc32c(0, a+iOff, (size_t)n), ~c);
      ck_assert_uint_eq(wal_crc32c(wal_crc32c(0, a+iOff, (size_t)n/3),
                                   a+iOff+n/3, (size_t)(n-n/3)), ~c);
    }
  }
  wal_crc32c_test_table(0);
}
END_TEST

/* ------------------------------------------------------ append + replay */

START_TEST(test_wal_replay_hands_unconfirmed_in_cid_order){
  char *zDir = th_tmpdir("walorder");
  Wal *pWal = tw_open(zDir);
  uint64_t aCid[50];
  TwSeen *s;
  int i;
  for(i=0; i<50; i++){
    char zKey[16];
    snprintf(zKey, sizeof(zKey), "k%d", i);
    aCid[i] = tw_append(pWal, 100+i, "t", zKey, "v", 1);
    if( i>0 ) ck_assert_uint_gt(aCid[i], aCid[i-1]);
  }
  /* confirm every third in this session: still replayed after reopen,
  ** because at open every record in a live segment is unconfirmed */
  for(i=0; i<50; i+=3) ck_assert_int_eq(wal_confirm(pWal, aCid[i], "t", 1), 0);
  wal_close(pWal);
  pWal = tw_open(zDir);
  s = tw_replay(pWal, 0);
  ck_assert_int_eq(s->n, 50);
  for(i=0; i<50; i++){
    char zKey[16];
    snprintf(zKey, sizeof(zKey), "k%d", i);
    ck_assert_uint_eq(s->aCid[i], aCid[i]);
    ck_assert_uint_eq(s->aTid[i], 100+i);
    ck_assert_str_eq(s->azKey[i], zKey);
  }
  sqlite3_free(s);
  /* confirm the odd ones: a second replay hands exactly the rest */
  for(i=1; i<50; i+=2) wal_confirm_record(pWal, aCid[i]);
  s = tw_replay(pWal, 0);
  ck_assert_int_eq(s->n, 25);
  for(i=0; i<25; i++) ck_assert_uint_eq(s->aCid[i], aCid[2*i]);
  sqlite3_free(s);
  wal_close(pWal);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_wal_replay_twice_gives_same_sequence){
  char *zDir = th_tmpdir("waltwice");
  Wal *pWal = tw_open(zDir);
  TwSeen *s1, *s2;
  int i;
  for(i=0; i<20; i++) tw_append(pWal, i, "t", "k", "v", 1);
  wal_close(pWal);
  pWal = tw_open(zDir);
  s1 = tw_replay(pWal, 0);
  s2 = tw_replay(pWal, 0);
  ck_assert_int_eq(s1->n, 20);
  ck_assert_int_eq(s2->n, s1->n);
  ck_assert_int_eq(memcmp(s1->aCid, s2->aCid, sizeof(uint64_t)*20), 0);
  sqlite3_free(s1);
  sqlite3_free(s2);
  wal_close(pWal);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_wal_confirm_then_reopen_replays_nothing){
  char *zDir = th_tmpdir("walconf");
  Wal *pWal = tw_open(zDir);
  TwSeen *s;
  WalStats st;
  int i;
  for(i=0; i<10; i++) tw_append(pWal, i, "t", "k", "v", 1);
  wal_close(pWal);
  pWal = tw_open(zDir);
  s = tw_replay(pWal, 1);                /* apply and confirm each */
  ck_assert_int_eq(s->n, 10);
  sqlite3_free(s);
  wal_stats(pWal, &st);
  ck_assert_int_eq(st.nUnconfirmed, 0);
  wal_close(pWal);
  pWal = tw_open(zDir);
  s = tw_replay(pWal, 0);
  ck_assert_int_eq(s->n, 0);
  sqlite3_free(s);
  wal_close(pWal);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_wal_record_waits_for_every_pending_table){
  char *zDir = th_tmpdir("walpend");
  Wal *pWal = tw_open(zDir);
  WalRecordBuilder *pRec = tw_rec(1, "a", "k", "v");
  const char *az[2] = {"a", "bb"};
  int an[2] = {1, 2};
  uint64_t cid;
  WalStats st;
  wal_record_table(pRec, "bb", 2);
  wal_record_action(pRec, 0, "k", 1, "v", 1);
  ck_assert_int_eq(wal_append(pWal, pRec, 2, az, an, &cid, 0), SQLITE_OK);
  wal_record_free(pRec);
  wal_stats(pWal, &st);
  ck_assert_int_eq(st.nUnconfirmed, 1);
  ck_assert_int_eq(wal_confirm(pWal, cid, "a", 1), SQLITE_OK);
  ck_assert_int_eq(wal_confirm(pWal, cid, "a", 1), SQLITE_OK);   /* again */
  ck_assert_int_eq(wal_confirm(pWal, cid, "zz", 2), SQLITE_OK);  /* foreign */
  ck_assert_int_eq(wal_confirm(pWal, cid+100, "a", 1), SQLITE_OK); /* unknown */
  wal_stats(pWal, &st);
  ck_assert_int_eq(st.nUnconfirmed, 1);
  ck_assert_int_eq(wal_confirm(pWal, cid, "bb", 2), SQLITE_OK);
  wal_stats(pWal, &st);
  ck_assert_int_eq(st.nUnconfirmed, 0);
  ck_assert_int_eq(st.nAppend, 1);
  ck_assert_uint_eq(st.lastCid, cid);
  ck_assert_int_eq(wal_confirm(pWal, cid, 0, 1), SQLITE_MISUSE);
  /* a table named twice is waited for once */
  pRec = tw_rec(2, "a", "k", "v");
  az[1] = "a"; an[1] = 1;
  ck_assert_int_eq(wal_append(pWal, pRec, 2, az, an, &cid, 0), SQLITE_OK);
  wal_record_free(pRec);
  ck_assert_int_eq(wal_confirm(pWal, cid, "a", 1), SQLITE_OK);
  wal_stats(pWal, &st);
  ck_assert_int_eq(st.nUnconfirmed, 0);
  wal_close(pWal);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_wal_cid_survives_full_retirement){
  char *zDir = th_tmpdir("walcid");
  Wal *pWal = tw_open(zDir);
  uint64_t cid = 0;
  WalStats st;
  int i;
  for(i=0; i<5; i++) cid = tw_append(pWal, i, "t", "k", "v", 1);
  for(i=1; i<=5; i++) wal_confirm(pWal, (uint64_t)i, "t", 1);
  wal_close(pWal);               /* everything confirmed: all retires */
  pWal = tw_open(zDir);
  wal_stats(pWal, &st);
  ck_assert_int_eq(st.nUnconfirmed, 0);
  ck_assert_int_eq(st.nSegment, 1);
  ck_assert_uint_eq(st.lastCid, cid);
  ck_assert_uint_gt(tw_append(pWal, 9, "t", "k", "v", 1), cid);
  wal_close(pWal);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_wal_hold_keeps_confirmed_records_for_replay){
  char *zDir = th_tmpdir("walhold");
  Wal *pWal = tw_open(zDir);
  TwSeen *s;
  int i;
  for(i=0; i<5; i++) tw_append(pWal, i, "t", "k", "v", 1);
  wal_hold(pWal);
  for(i=1; i<=5; i++) wal_confirm(pWal, (uint64_t)i, "t", 1);
  wal_close(pWal);               /* all confirmed, but held: none retires */
  pWal = tw_open(zDir);
  s = tw_replay(pWal, 1);
  ck_assert_int_eq(s->n, 5);
  ck_assert_uint_eq(s->aCid[0], 1);
  sqlite3_free(s);
  wal_close(pWal);               /* replayed and confirmed: now it retires */
  pWal = tw_open(zDir);
  s = tw_replay(pWal, 0);
  ck_assert_int_eq(s->n, 0);
  sqlite3_free(s);
  wal_close(pWal);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_wal_replay_stops_on_callback_error){
  char *zDir = th_tmpdir("walstop");
  Wal *pWal = tw_open(zDir);
  TwSeen *s;
  char *zErr = 0;
  int i;
  for(i=0; i<5; i++) tw_append(pWal, i, "t", "k", "v", 1);
  wal_close(pWal);
  pWal = tw_open(zDir);
  s = sqlite3_malloc64(sizeof(TwSeen));
  memset(s, 0, sizeof(*s));
  s->rcStopAt = 2;
  ck_assert_int_eq(wal_replay(pWal, tw_collect, s, &zErr), SQLITE_ABORT);
  ck_assert_int_eq(s->n, 2);
  ck_assert_ptr_nonnull(zErr);
  sqlite3_free(zErr);
  sqlite3_free(s);
  wal_close(pWal);
  sqlite3_free(zDir);
}
END_TEST

typedef struct TwReentry TwReentry;
struct TwReentry { Wal *pWal; int rc; char *zErr; };

static int tw_append_inside(void *pCtx, const WalRecord *pRec){
  TwReentry *r = (TwReentry*)pCtx;
  WalRecordBuilder *pNew = tw_rec(1, "t", "k", "v");
  uint64_t cid;
  (void)pRec;
  if( r->zErr==0 ) r->rc = wal_append(r->pWal, pNew, 0, 0, 0, &cid, &r->zErr);
  wal_record_free(pNew);
  return SQLITE_OK;
}

/* An append from inside the replay callback would wait for the replay
** forever; it is refused instead. */
START_TEST(test_wal_append_inside_replay_is_misuse){
  char *zDir = th_tmpdir("walreent");
  Wal *pWal = tw_five(zDir);
  TwReentry r;
  wal_close(pWal);
  pWal = tw_open(zDir);
  memset(&r, 0, sizeof(r));
  r.pWal = pWal;
  ck_assert_int_eq(wal_replay(pWal, tw_append_inside, &r, 0), SQLITE_OK);
  ck_assert_int_eq(r.rc, SQLITE_MISUSE);
  ck_assert_msg(r.zErr && strstr(r.zErr, "replay"), "%s", r.zErr);
  sqlite3_free(r.zErr);
  tw_append(pWal, 1, "t", "k", "v", 1);          /* after replay: fine */
  wal_close(pWal);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_wal_replay_after_append_is_misuse){
  char *zDir = th_tmpdir("walmisuse");
  Wal *pWal = tw_open(zDir);
  char *zErr = 0;
  TwSeen s;
  tw_append(pWal, 1, "t", "k", "v", 1);
  memset(&s, 0, sizeof(s));
  ck_assert_int_eq(wal_replay(pWal, tw_collect, &s, &zErr), SQLITE_MISUSE);
  ck_assert_ptr_nonnull(strstr(zErr, "before the first append"));
  sqlite3_free(zErr);
  wal_close(pWal);
  wal_close(0);
  sqlite3_free(zDir);
}
END_TEST

/* ------------------------------------------------------------- segments */

/* Offsets of the frames of a segment file, parsed independently of wal/. */
static int tw_frames(const char *zPath, off_t *aOff, int nMax){
  off_t sz = tw_size(zPath), off = TW_SEG_HDR;
  int fd = open(zPath, O_RDONLY), n = 0;
  ck_assert_int_ge(fd, 0);
  while( off+8<=sz && n<nMax ){
    unsigned char h[4];
    ck_assert_int_eq(pread(fd, h, 4, off), 4);
    aOff[n++] = off;
    off += 8 + (h[0] | (h[1]<<8) | (h[2]<<16) | ((off_t)h[3]<<24));
  }
  close(fd);
  return n;
}

static void tw_truncate(const char *zPath, off_t sz){
  ck_assert_int_eq(truncate(zPath, sz), 0);
}

static void tw_append_bytes(const char *zPath, const void *a, size_t n){
  int fd = open(zPath, O_WRONLY|O_APPEND);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(write(fd, a, n), (ssize_t)n);
  close(fd);
}

START_TEST(test_wal_torn_tail_is_truncated){
  char *zDir = th_tmpdir("waltorn");
  char *zPath = tw_seg_path(zDir, 1);
  Wal *pWal = tw_five(zDir);
  off_t aOff[8], szFull;
  TwSeen *s;
  int nFrame;
  wal_close(pWal);
  nFrame = tw_frames(zPath, aOff, 8);
  ck_assert_int_eq(nFrame, 5);
  szFull = tw_size(zPath);
  tw_truncate(zPath, szFull-3);           /* tear the last record */
  pWal = tw_open(zDir);
  ck_assert_int_eq(tw_size(zPath), aOff[4]);   /* cut at the torn frame */
  s = tw_replay(pWal, 0);
  ck_assert_int_eq(s->n, 4);
  ck_assert_str_eq(s->azKey[3], "k4");
  sqlite3_free(s);
  /* still appendable, and the new record follows the kept ones */
  ck_assert_uint_eq(tw_append(pWal, 9, "t", "after", "v", 1), 5);
  wal_close(pWal);
  pWal = tw_open(zDir);
  s = tw_replay(pWal, 0);
  ck_assert_int_eq(s->n, 5);
  ck_assert_str_eq(s->azKey[4], "after");
  sqlite3_free(s);
  wal_close(pWal);
  sqlite3_free(zPath);
  sqlite3_free(zDir);
}
END_TEST

/* Garbage, zeros, or a lone partial header after the last frame.  Zeros
** that run to the end of the file are padding (preallocated space): they
** are kept, and appends continue after the last frame. */
START_TEST(test_wal_garbage_tail_is_truncated){
  static const char *azTail[] = {"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00",
                                 "\x05\x00\x00\x00garbage!", "\x01\x02"};
  static const int anTail[] = {10, 12, 2};
  char *zDir = th_tmpdir("walgarb");
  char *zPath = tw_seg_path(zDir, 1);
  Wal *pWal = tw_five(zDir);
  off_t szGood;
  TwSeen *s;
  wal_close(pWal);
  szGood = tw_size(zPath);
  tw_append_bytes(zPath, azTail[_i], anTail[_i]);
  pWal = tw_open(zDir);
  ck_assert_int_eq(tw_size(zPath), _i==0 ? szGood+anTail[0] : szGood);
  s = tw_replay(pWal, 0);
  ck_assert_int_eq(s->n, 5);
  sqlite3_free(s);
  ck_assert_uint_eq(tw_append(pWal, 9, "t", "more", "v", 1), 6);
  wal_close(pWal);
  pWal = tw_open(zDir);
  s = tw_replay(pWal, 0);
  ck_assert_int_eq(s->n, 6);
  ck_assert_str_eq(s->azKey[5], "more");
  sqlite3_free(s);
  wal_close(pWal);
  sqlite3_free(zPath);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_wal_bad_crc_in_newest_tail_is_cut){
  char *zDir = th_tmpdir("walcrc");
  char *zPath = tw_seg_path(zDir, 1);
  Wal *pWal = tw_five(zDir);
  off_t aOff[8];
  TwSeen *s;
  wal_close(pWal);
  ck_assert_int_eq(tw_frames(zPath, aOff, 8), 5);
  tw_poke(zPath, aOff[2]+10, 1);           /* a body byte of record 3 */
  pWal = tw_open(zDir);
  ck_assert_int_eq(tw_size(zPath), aOff[2]);
  s = tw_replay(pWal, 0);
  ck_assert_int_eq(s->n, 2);
  ck_assert_str_eq(s->azKey[1], "k2");
  sqlite3_free(s);
  wal_close(pWal);
  sqlite3_free(zPath);
  sqlite3_free(zDir);
}
END_TEST

/* Random damage to the frames of segment 1: flipped bytes, a cut, or
** appended garbage. */
static void tw_damage(const char *zPath){
  off_t sz = tw_size(zPath);
  int eKind = rand()%3, k;
  if( eKind==0 ){
    int n = 1 + rand()%4;
    for(k=0; k<n; k++){
      tw_poke(zPath, TW_SEG_HDR + rand()%(int)(sz-TW_SEG_HDR), 1+rand()%255);
    }
  }else if( eKind==1 ){
    tw_truncate(zPath, TW_SEG_HDR + rand()%(int)(sz-TW_SEG_HDR));
  }else{
    unsigned char a[64];
    int n = 1 + rand()%64;
    for(k=0; k<n; k++) a[k] = (unsigned char)rand();
    tw_append_bytes(zPath, a, n);
  }
}

static int tw_count_segments(const char *zDir){
  WalStats st;
  Wal *pWal = tw_open(zDir);
  wal_stats(pWal, &st);
  wal_close(pWal);
  return st.nSegment;
}

/* Damage in the newest segment always opens (the tail is cut) and keeps
** a prefix of the records; damage in an older one is SQLITE_CORRUPT (or
** harmless); nothing crashes. */
START_TEST(test_wal_open_survives_random_damage){
  int bOlder = _i, iTrial;
  srand(4242 + _i);
  for(iTrial=0; iTrial<60; iTrial++){
    char *zDir = th_tmpdir("waldamage");
    char *zSeg1 = tw_seg_path(zDir, 1);
    Wal *pWal = bOlder ? tw_open_cfg(zDir, 120, 0, 0) : tw_open(zDir);
    char *zErr = 0;
    TwSeen *s;
    int i, rc;
    for(i=0; i<6; i++){
      char zKey[16];
      snprintf(zKey, sizeof(zKey), "k%d", i+1);
      tw_append(pWal, i, "t", zKey, "value", 1);
    }
    wal_close(pWal);
    ck_assert_int_eq(tw_count_segments(zDir)>1, bOlder);
    tw_damage(zSeg1);
    pWal = 0;
    rc = wal_open(zDir, 0, &pWal, &zErr);
    if( bOlder ){
      ck_assert_msg(rc==SQLITE_OK || rc==SQLITE_CORRUPT, "rc=%d", rc);
      if( rc==SQLITE_CORRUPT ){
        ck_assert_msg(strstr(zErr, "0000000000000001.log"), "%s", zErr);
      }
    }else{
      ck_assert_msg(rc==SQLITE_OK, "rc=%d %s", rc, zErr ? zErr : "");
    }
    sqlite3_free(zErr);
    if( pWal ){
      s = tw_replay(pWal, 0);
      for(i=0; i<s->n; i++){
        char zKey[16];
        snprintf(zKey, sizeof(zKey), "k%d", i+1);
        ck_assert_str_eq(s->azKey[i], zKey);
      }
      sqlite3_free(s);
      wal_close(pWal);
    }
    sqlite3_free(zSeg1);
    sqlite3_free(zDir);
  }
}
END_TEST

/* Several segments of about 200 bytes: ~4 records each. */
static Wal *tw_segments(const char *zDir, int nRec, int bBak){
  Wal *pWal = tw_open_cfg(zDir, 200, bBak, 0);
  int i;
  for(i=0; i<nRec; i++){
    char zKey[16];
    snprintf(zKey, sizeof(zKey), "key-%03d", i+1);
    tw_append(pWal, i, "t", zKey, "some-value-bytes", 1);
  }
  return pWal;
}

START_TEST(test_wal_bad_frame_in_older_segment_is_corrupt){
  char *zDir = th_tmpdir("walold");
  char *zPath = tw_seg_path(zDir, 1);
  Wal *pWal = tw_segments(zDir, 20, 0);
  off_t aOff[8];
  char *zErr = 0;
  char zWant[64];
  WalStats st;
  int rc;
  wal_stats(pWal, &st);
  ck_assert_int_gt(st.nSegment, 2);
  wal_close(pWal);
  ck_assert_int_ge(tw_frames(zPath, aOff, 8), 2);
  tw_poke(zPath, aOff[1]+12, 3);
  pWal = (Wal*)1;
  rc = wal_open(zDir, 0, &pWal, &zErr);
  ck_assert_int_eq(rc, SQLITE_CORRUPT);
  ck_assert_ptr_null(pWal);
  ck_assert_ptr_nonnull(zErr);
  ck_assert_msg(strstr(zErr, "wal/0000000000000001.log")!=0, "%s", zErr);
  snprintf(zWant, sizeof(zWant), "offset %lld", (long long)aOff[1]);
  ck_assert_msg(strstr(zErr, zWant)!=0, "%s", zErr);
  sqlite3_free(zErr);
  ck_assert_int_gt(tw_size(zPath), aOff[1]);      /* nothing was cut */
  sqlite3_free(zPath);
  sqlite3_free(zDir);
}
END_TEST

/* Losing whole records at the end of an older segment leaves every frame
** valid; the next segment's header still tells the sealed size. */
START_TEST(test_wal_older_segment_cut_at_frame_boundary_is_corrupt){
  char *zDir = th_tmpdir("walcutold");
  char *zPath = tw_seg_path(zDir, 1);
  Wal *pWal = tw_segments(zDir, 20, 0);
  Wal *pWal2 = 0;
  off_t aOff[8];
  char *zErr = 0;
  int n;
  wal_close(pWal);
  n = tw_frames(zPath, aOff, 8);
  ck_assert_int_ge(n, 2);
  tw_truncate(zPath, aOff[n-1]);
  ck_assert_int_eq(wal_open(zDir, 0, &pWal2, &zErr), SQLITE_CORRUPT);
  ck_assert_msg(strstr(zErr, "0000000000000001.log")!=0, "%s", zErr);
  ck_assert_msg(strstr(zErr, "sealed")!=0, "%s", zErr);
  sqlite3_free(zErr);
  sqlite3_free(zPath);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_wal_bad_header_in_older_segment_is_corrupt){
  char *zDir = th_tmpdir("walhdr");
  char *zPath = tw_seg_path(zDir, 1);
  Wal *pWal = tw_segments(zDir, 20, 0);
  Wal *pWal2 = 0;
  char *zErr = 0;
  wal_close(pWal);
  tw_poke(zPath, 2, 1);                    /* inside the magic */
  ck_assert_int_eq(wal_open(zDir, 0, &pWal2, &zErr), SQLITE_CORRUPT);
  ck_assert_msg(strstr(zErr, "0000000000000001.log")!=0, "%s", zErr);
  ck_assert_msg(strstr(zErr, "header")!=0, "%s", zErr);
  sqlite3_free(zErr);
  sqlite3_free(zPath);
  sqlite3_free(zDir);
}
END_TEST

/* A newest segment shorter than its header is a rotation that never
** finished: it is replaced, and the older records stay. */
START_TEST(test_wal_torn_segment_creation_is_replaced){
  char *zDir = th_tmpdir("walnewseg");
  Wal *pWal = tw_five(zDir);
  char *zPath2 = tw_seg_path(zDir, 2);
  char *zPath3 = tw_seg_path(zDir, 3);
  TwSeen *s;
  WalStats st;
  static const int anTorn[] = {5, TW_SEG_HDR, 0};
  char aZero[TW_SEG_HDR];
  wal_close(pWal);
  memset(aZero, 0, sizeof(aZero));
  close(open(zPath2, O_CREAT|O_WRONLY, 0644));
  if( _i==0 ) tw_append_bytes(zPath2, "DEPOT", anTorn[_i]);
  if( _i==1 ) tw_append_bytes(zPath2, aZero, anTorn[_i]);
  pWal = tw_open(zDir);
  ck_assert(!tw_exists(zPath2));
  ck_assert(tw_exists(zPath3));
  s = tw_replay(pWal, 0);
  ck_assert_int_eq(s->n, 5);
  sqlite3_free(s);
  ck_assert_uint_eq(tw_append(pWal, 1, "t", "k", "v", 1), 6);
  wal_stats(pWal, &st);
  ck_assert_int_eq(st.nSegment, 2);
  wal_close(pWal);
  sqlite3_free(zPath2);
  sqlite3_free(zPath3);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_wal_rotation_by_size){
  char *zDir = th_tmpdir("walrot");
  Wal *pWal = tw_segments(zDir, 40, 0);
  WalStats st;
  TwSeen *s;
  uint64_t i;
  wal_stats(pWal, &st);
  ck_assert_int_ge(st.nSegment, 5);
  wal_close(pWal);                 /* trims the active segment's padding */
  for(i=1; i<=(uint64_t)st.nSegment; i++){
    char *zPath = tw_seg_path(zDir, i);
    /* a segment passes 200 bytes by at most one group */
    ck_assert_int_lt(tw_size(zPath), 200 + 64);
    sqlite3_free(zPath);
  }
  pWal = tw_open_cfg(zDir, 200, 0, 0);
  s = tw_replay(pWal, 0);
  ck_assert_int_eq(s->n, 40);
  for(i=0; i<40; i++) ck_assert_uint_eq(s->aCid[i], i+1);
  sqlite3_free(s);
  wal_close(pWal);
  sqlite3_free(zDir);
}
END_TEST

/* Confirming everything in segment 2 leaves it on disk while segment 1
** still holds an unconfirmed record; confirming that retires both. */
static void tw_check_retire_order(int bBak){
  char *zDir = th_tmpdir("walretire");
  Wal *pWal = tw_segments(zDir, 20, bBak);
  char *zSeg1 = tw_seg_path(zDir, 1);
  char *zSeg2 = tw_seg_path(zDir, 2);
  char *zBak1 = sqlite3_mprintf("%s.bak", zSeg1);
  char *zBak2 = sqlite3_mprintf("%s.bak", zSeg2);
  off_t aOff[16];
  int n1 = tw_frames(zSeg1, aOff, 16);
  int n2 = tw_frames(zSeg2, aOff, 16);
  WalStats st;
  uint64_t cid;
  TwSeen *s;
  ck_assert_int_gt(n1, 1);
  ck_assert_int_gt(n2, 0);
  /* everything but the first record of segment 1 */
  for(cid=2; cid<=(uint64_t)(n1+n2); cid++) wal_confirm(pWal, cid, "t", 1);
  ck_assert(tw_exists(zSeg1));
  ck_assert(tw_exists(zSeg2));
  wal_confirm(pWal, 1, "t", 1);
  ck_assert(!tw_exists(zSeg1));
  ck_assert(!tw_exists(zSeg2));
  ck_assert_int_eq(tw_exists(zBak1), bBak);
  ck_assert_int_eq(tw_exists(zBak2), bBak);
  wal_stats(pWal, &st);
  ck_assert_int_eq(st.nUnconfirmed, 20 - n1 - n2);
  wal_close(pWal);
  /* .bak files are ignored by the next open */
  pWal = tw_open_cfg(zDir, 200, bBak, 0);
  s = tw_replay(pWal, 0);
  ck_assert_int_eq(s->n, 20 - n1 - n2);
  ck_assert_uint_eq(s->aCid[0], (uint64_t)(n1+n2+1));
  sqlite3_free(s);
  wal_close(pWal);
  sqlite3_free(zSeg1); sqlite3_free(zSeg2);
  sqlite3_free(zBak1); sqlite3_free(zBak2);
  sqlite3_free(zDir);
}

START_TEST(test_wal_retirement_keeps_segment_order){
  tw_check_retire_order(0);
}
END_TEST

START_TEST(test_wal_retirement_bak_mode_renames){
  tw_check_retire_order(1);
}
END_TEST

START_TEST(test_wal_open_rejects_bad_arguments){
  Wal *pWal = (Wal*)1;
  char *zErr = 0;
  char *zDir = th_tmpdir("walargs");
  char *zMissing = sqlite3_mprintf("%s/no/such/dir", zDir);
  uint64_t cid;
  ck_assert_int_eq(wal_open("", 0, &pWal, &zErr), SQLITE_MISUSE);
  ck_assert_ptr_null(pWal);
  ck_assert_ptr_nonnull(zErr);
  sqlite3_free(zErr); zErr = 0;
  ck_assert_int_eq(wal_open(zMissing, 0, &pWal, &zErr), SQLITE_CANTOPEN);
  ck_assert_msg(strstr(zErr, "no/such/dir")!=0, "%s", zErr);
  sqlite3_free(zErr); zErr = 0;
  pWal = tw_open(zDir);
  ck_assert_int_eq(wal_append(pWal, 0, 0, 0, 0, &cid, &zErr), SQLITE_MISUSE);
  ck_assert_ptr_nonnull(zErr);
  sqlite3_free(zErr); zErr = 0;
  {
    WalRecordBuilder *pRec = tw_rec(1, "t", "k", "v");
    const char *az[1] = {0};
    int an[1] = {1};
    ck_assert_int_eq(wal_append(pWal, pRec, 1, az, an, &cid, &zErr),
                     SQLITE_MISUSE);
    sqlite3_free(zErr); zErr = 0;
    ck_assert_int_eq(wal_append(pWal, pRec, 0, 0, 0, 0, 0), SQLITE_MISUSE);
    wal_record_free(pRec);
  }
  ck_assert_int_eq(wal_replay(pWal, 0, 0, 0), SQLITE_MISUSE);
  wal_close(pWal);
  sqlite3_free(zMissing);
  sqlite3_free(zDir);
}
END_TEST

/* ---------------------------------------------------------- group commit */

#define TW_NTHREAD 8
#define TW_PER_THREAD 150

typedef struct TwThread TwThread;
struct TwThread {
  Wal *pWal;
  int iThread;
  int bConfirm;
  int nAppend;              /* appends to make; 0 means TW_PER_THREAD */
  uint64_t aCid[TW_PER_THREAD];
  int rc;
};

static void *tw_thread_main(void *pArg){
  TwThread *t = (TwThread*)pArg;
  int i, n = t->nAppend>0 ? t->nAppend : TW_PER_THREAD;
  for(i=0; i<n && t->rc==SQLITE_OK; i++){
    WalRecordBuilder *pRec = wal_record_new((uint64_t)t->iThread);
    char zKey[32];
    const char *az[1] = {"t"};
    int an[1] = {1};
    snprintf(zKey, sizeof(zKey), "t%d-%d", t->iThread, i);
    if( pRec==0 ){ t->rc = SQLITE_NOMEM; break; }
    t->rc = wal_record_table(pRec, "t", 1);
    if( t->rc==SQLITE_OK ){
      t->rc = wal_record_action(pRec, 0, zKey, (int)strlen(zKey), "v", 1);
    }
    if( t->rc==SQLITE_OK ){
      t->rc = wal_append(t->pWal, pRec, 1, az, an, &t->aCid[i], 0);
    }
    if( t->rc==SQLITE_OK && t->bConfirm && (i%2)==0 ){
      t->rc = wal_confirm(t->pWal, t->aCid[i], "t", 1);
    }
    wal_record_free(pRec);
  }
  return 0;
}

/* Runs tw_thread_main for aT[0..nThread), at most TW_NTHREAD, at once and
** waits for them all. */
static void tw_run_threads(TwThread *aT, int nThread){
  pthread_t aId[TW_NTHREAD];
  int i;
  ck_assert_int_le(nThread, TW_NTHREAD);
  for(i=0; i<nThread; i++){
    ck_assert_int_eq(pthread_create(&aId[i], 0, tw_thread_main, &aT[i]), 0);
  }
  for(i=0; i<nThread; i++) pthread_join(aId[i], 0);
}

static int tw_cmp_u64(const void *a, const void *b){
  uint64_t x = *(const uint64_t*)a, y = *(const uint64_t*)b;
  return x<y ? -1 : x>y ? 1 : 0;
}

START_TEST(test_wal_group_commit_from_eight_threads){
  char *zDir = th_tmpdir("walgroup");
  Wal *pWal = tw_open_cfg(zDir, 16*1024, 0, 0);   /* rotate under load */
  TwThread *aT = sqlite3_malloc64(sizeof(TwThread)*TW_NTHREAD);
  uint64_t *aAll = sqlite3_malloc64(sizeof(uint64_t)*TW_NTHREAD*TW_PER_THREAD);
  int i, j, n = 0, bConfirm = _i;
  WalStats st;
  TwSeen *s;
  memset(aT, 0, sizeof(TwThread)*TW_NTHREAD);
  for(i=0; i<TW_NTHREAD; i++){
    aT[i].pWal = pWal;
    aT[i].iThread = i;
    aT[i].bConfirm = bConfirm;
  }
  tw_run_threads(aT, TW_NTHREAD);
  for(i=0; i<TW_NTHREAD; i++){
    ck_assert_int_eq(aT[i].rc, SQLITE_OK);
    for(j=0; j<TW_PER_THREAD; j++){
      if( !bConfirm || (j%2)==1 ) aAll[n++] = aT[i].aCid[j];
    }
  }
  wal_stats(pWal, &st);
  ck_assert_int_eq(st.nAppend, TW_NTHREAD*TW_PER_THREAD);
  ck_assert_int_lt(st.nFlush, st.nAppend);
  ck_assert_int_eq(st.nUnconfirmed, n);
  wal_close(pWal);
  qsort(aAll, n, sizeof(uint64_t), tw_cmp_u64);
  pWal = tw_open_cfg(zDir, 16*1024, 0, 0);
  s = tw_replay(pWal, 0);
  /* every acknowledged, unconfirmed append is replayed, in CID order;
  ** confirmed ones may reappear only if their segment is still live */
  ck_assert_int_ge(s->n, n);
  for(i=1; i<s->n; i++) ck_assert_uint_gt(s->aCid[i], s->aCid[i-1]);
  for(i=0, j=0; i<n; i++){
    while( j<s->n && s->aCid[j]<aAll[i] ) j++;
    ck_assert_msg(j<s->n && s->aCid[j]==aAll[i], "cid %llu lost",
                  (unsigned long long)aAll[i]);
  }
  sqlite3_free(s);
  wal_close(pWal);
  sqlite3_free(aAll);
  sqlite3_free(aT);
  sqlite3_free(zDir);
}
END_TEST

/* A WalIo whose flushes take at least usDelay more microseconds (set at
** any time), to steer the spin-or-sleep choice of waiting appenders. */
typedef struct TwSlowIo TwSlowIo;
struct TwSlowIo { WalIo io; const WalIo *pBase; int usDelay; };

static int tw_slowio_fsync(void *pCtx, int fd){
  TwSlowIo *t = (TwSlowIo*)pCtx;
  int rc = t->pBase->xFsync(t->pBase->pCtx, fd);
  int us = __atomic_load_n(&t->usDelay, __ATOMIC_RELAXED);
  if( us>0 ){
    struct timespec ts;
    ts.tv_sec = us/1000000;
    ts.tv_nsec = (long)(us%1000000)*1000;
    while( nanosleep(&ts, &ts)!=0 && errno==EINTR ){}
  }
  return rc;
}

static void tw_slowio_init(TwSlowIo *t, int usDelay){
  t->pBase = wal_io_posix();
  t->io = *t->pBase;
  t->io.pCtx = t;
  t->io.xFsync = tw_slowio_fsync;
  t->usDelay = usDelay;
}

static double tw_seconds(clockid_t clk){
  struct timespec ts;
  clock_gettime(clk, &ts);
  return (double)ts.tv_sec + ts.tv_nsec*1e-9;
}

/* Runs nThread appenders of nAppend appends each on pWal; returns the CPU
** time the process spent meanwhile as a fraction of the wall time. */
static double tw_run_appenders(Wal *pWal, int nThread, int nAppend){
  TwThread *aT = sqlite3_malloc64(sizeof(TwThread)*(size_t)nThread);
  double tWall, tCpu;
  int i;
  ck_assert_ptr_nonnull(aT);
  memset(aT, 0, sizeof(TwThread)*(size_t)nThread);
  for(i=0; i<nThread; i++){
    aT[i].pWal = pWal;
    aT[i].iThread = i;
    aT[i].nAppend = nAppend;
  }
  tWall = tw_seconds(CLOCK_MONOTONIC);
  tCpu = tw_seconds(CLOCK_PROCESS_CPUTIME_ID);
  tw_run_threads(aT, nThread);
  tCpu = tw_seconds(CLOCK_PROCESS_CPUTIME_ID) - tCpu;
  tWall = tw_seconds(CLOCK_MONOTONIC) - tWall;
  for(i=0; i<nThread; i++) ck_assert_int_eq(aT[i].rc, SQLITE_OK);
  sqlite3_free(aT);
  return tCpu/tWall;
}

/* Fails unless the process used under a quarter of a CPU (fCpu, from
** tw_run_appenders) while its appenders waited.  Memcheck runs each CPU
** step many times slower, so there is no bound under it. */
static void tw_assert_waits_idle(double fCpu, const char *zWhen){
  ck_assert_msg(fCpu<0.25 || th_under_valgrind(),
                "appenders used %.2f CPUs %s", fCpu, zWhen);
}

/* On a log whose flushes take milliseconds, appenders waiting for a group
** sleep: they do not spin for the length of the flush. */
START_TEST(test_wal_waiters_sleep_on_a_slow_log){
  char *zDir = th_tmpdir("walslow");
  TwSlowIo slow;
  Wal *pWal;
  WalStats st;
  double fCpu;
  tw_slowio_init(&slow, 10000);
  pWal = tw_open_cfg(zDir, 0, 0, &slow.io);
  tw_run_appenders(pWal, 1, 2);       /* the segment's first extension */
  fCpu = tw_run_appenders(pWal, TW_NTHREAD, 25);
  wal_stats(pWal, &st);
  ck_assert_int_eq(st.nAppend, 2 + TW_NTHREAD*25);
  ck_assert_int_lt(st.nFlush, st.nAppend);          /* groups shared */
  tw_assert_waits_idle(fCpu, "while waiting");
  wal_close(pWal);
  sqlite3_free(zDir);
}
END_TEST

/* On a fast log waiting appenders spin, but for a bounded time: when a
** flush stalls far beyond the last ones, they go to sleep instead of
** spinning through the stall. */
START_TEST(test_wal_spinning_waiters_sleep_through_a_stalled_flush){
  char *zDir = th_tmpdir("walstall");
  TwSlowIo slow;
  Wal *pWal;
  WalStats st;
  double fCpu;
  tw_slowio_init(&slow, 50);
  pWal = tw_open_cfg(zDir, 0, 0, &slow.io);
  tw_run_appenders(pWal, TW_NTHREAD, 20);  /* fast flushes: spinning */
  __atomic_store_n(&slow.usDelay, 150000, __ATOMIC_RELAXED);
  fCpu = tw_run_appenders(pWal, TW_NTHREAD, 1);   /* the stall */
  wal_stats(pWal, &st);
  ck_assert_int_eq(st.nAppend, TW_NTHREAD*21);
  tw_assert_waits_idle(fCpu, "through a stall");
  wal_close(pWal);
  sqlite3_free(zDir);
}
END_TEST

/* Many appenders on a fast log (the spinning path): every append is
** acknowledged once, with its own CID, and groups share flushes. */
START_TEST(test_wal_group_commit_on_a_fast_log){
  char *zDir = th_tmpdir("walfast");
  TwSlowIo slow;
  Wal *pWal;
  WalStats st;
  tw_slowio_init(&slow, 100);
  pWal = tw_open_cfg(zDir, 16*1024, 0, &slow.io);
  tw_run_appenders(pWal, TW_NTHREAD, 60);
  wal_stats(pWal, &st);
  ck_assert_int_eq(st.nAppend, TW_NTHREAD*60);
  ck_assert_uint_eq(st.lastCid, TW_NTHREAD*60);
  ck_assert_int_lt(st.nFlush, st.nAppend);
  wal_close(pWal);
  sqlite3_free(zDir);
}
END_TEST

/* A group no member of which asks for a flush does not wait for more
** records: after eight FULL appenders raised the group target, one
** thread's NORMAL appends never make their leader wait (nGatherWait). */
START_TEST(test_wal_normal_appends_do_not_gather){
  char *zDir = th_tmpdir("walnogather");
  Wal *pWal = tw_open_cfg(zDir, 16*1024, 0, 0);
  WalStats st0, st1;
  int i;
  tw_run_appenders(pWal, TW_NTHREAD, 40);
  wal_stats(pWal, &st0);
  for(i=0; i<50; i++){
    WalRecordBuilder *pRec = wal_record_new(9);
    const char *az[1] = {"t"};
    int an[1] = {1};
    uint64_t cid = 0;
    ck_assert_ptr_nonnull(pRec);
    ck_assert_int_eq(wal_record_table(pRec, "t", 1), SQLITE_OK);
    ck_assert_int_eq(wal_record_action(pRec, 0, "k", 1, "v", 1), SQLITE_OK);
    ck_assert_int_eq(wal_append_sync(pWal, pRec, WAL_SYNC_NORMAL, 1, az, an,
                                     &cid, 0), SQLITE_OK);
    wal_record_free(pRec);
  }
  wal_stats(pWal, &st1);
  ck_assert_int_eq(st1.nAppend, st0.nAppend+50);
  ck_assert_int_eq(st1.nGatherWait, st0.nGatherWait);
  wal_close(pWal);
  sqlite3_free(zDir);
}
END_TEST

/* A thread of the mixed-durability test: appends alternate NORMAL and
** FULL (every third a wal_sync() instead); after each FULL append and each
** sync the log must report its CID durable.  Violations are counted. */
typedef struct TwMixed TwMixed;
struct TwMixed {
  Wal *pWal;
  int iThread;
  int nBad;                 /* FULL or synced CIDs found not durable */
  int rc;
};

static void *tw_mixed_main(void *pArg){
  TwMixed *t = (TwMixed*)pArg;
  int i;
  for(i=0; i<TW_PER_THREAD && t->rc==SQLITE_OK; i++){
    WalRecordBuilder *pRec = wal_record_new((uint64_t)t->iThread);
    int eSync = (i+t->iThread)%2 ? WAL_SYNC_FULL : WAL_SYNC_NORMAL;
    const char *az[1] = {"t"};
    int an[1] = {1};
    uint64_t cid = 0;
    WalStats st;
    if( pRec==0 ){ t->rc = SQLITE_NOMEM; break; }
    t->rc = wal_record_table(pRec, "t", 1);
    if( t->rc==SQLITE_OK ){
      t->rc = wal_record_action(pRec, 0, "k", 1, "v", 1);
    }
    if( t->rc==SQLITE_OK ){
      t->rc = wal_append_sync(t->pWal, pRec, eSync, 1, az, an, &cid, 0);
    }
    wal_record_free(pRec);
    if( t->rc==SQLITE_OK && eSync==WAL_SYNC_NORMAL && i%3==0 ){
      t->rc = wal_sync(t->pWal, cid, 0);
      eSync = WAL_SYNC_FULL;
    }
    wal_stats(t->pWal, &st);
    if( t->rc==SQLITE_OK && eSync==WAL_SYNC_FULL && st.syncedCid<cid ){
      t->nBad++;
    }
  }
  return 0;
}

/* NORMAL and FULL appenders and wal_sync() callers at once, on a
** rotating log: every append is acknowledged with its own CID, and a FULL
** append or a sync returns only when its CID - and so every CID before
** it - is durable. */
START_TEST(test_wal_mixed_durability_from_eight_threads){
  char *zDir = th_tmpdir("walmixed");
  Wal *pWal = tw_open_cfg(zDir, 16*1024, 0, 0);
  TwMixed aT[TW_NTHREAD];
  pthread_t aId[TW_NTHREAD];
  WalStats st;
  TwSeen *s;
  int i;
  memset(aT, 0, sizeof(aT));
  for(i=0; i<TW_NTHREAD; i++){
    aT[i].pWal = pWal;
    aT[i].iThread = i;
    ck_assert_int_eq(pthread_create(&aId[i], 0, tw_mixed_main, &aT[i]), 0);
  }
  for(i=0; i<TW_NTHREAD; i++) pthread_join(aId[i], 0);
  for(i=0; i<TW_NTHREAD; i++){
    ck_assert_int_eq(aT[i].rc, SQLITE_OK);
    ck_assert_int_eq(aT[i].nBad, 0);
  }
  wal_stats(pWal, &st);
  ck_assert_int_eq(st.nAppend, TW_NTHREAD*TW_PER_THREAD);
  ck_assert_int_gt(st.nDeferred, 0);
  wal_close(pWal);                 /* flushes the deferred tail */
  pWal = tw_open(zDir);
  s = tw_replay(pWal, 0);
  ck_assert_int_eq(s->n, TW_NTHREAD*TW_PER_THREAD);
  for(i=1; i<s->n; i++) ck_assert_uint_gt(s->aCid[i], s->aCid[i-1]);
  sqlite3_free(s);
  wal_close(pWal);
  sqlite3_free(zDir);
}
END_TEST

/* ----------------------------------------------------------------- faults */

typedef struct TwFaultCase TwFaultCase;
struct TwFaultCase {
  int eKind;
  int err;
  int rcWant;
  const char *zWant;        /* in the message */
};
static const TwFaultCase aFaultCase[] = {
  { WAL_FAULT_WRITE, EIO,    SQLITE_IOERR_WRITE, "Input/output error" },
  { WAL_FAULT_WRITE, ENOSPC, SQLITE_FULL,        "No space left" },
  { WAL_FAULT_WRITE, EFBIG,  SQLITE_FULL,        "File too large" },
  { WAL_FAULT_SHORT, 0,      SQLITE_IOERR_WRITE, "short write" },
  { WAL_FAULT_FSYNC, EIO,    SQLITE_IOERR_FSYNC, "fdatasync" },
};

/* One injected fault on the 4th append: the error and message come back,
** later appends work, and after reopen exactly the acknowledged records
** are replayed. */
START_TEST(test_wal_injected_fault_fails_only_that_append){
  const TwFaultCase *c = &aFaultCase[_i];
  char *zDir = th_tmpdir("walfault");
  WalFault *pF = wal_fault_new(wal_io_posix());
  Wal *pWal = tw_open_cfg(zDir, 0, 0, wal_fault_io(pF));
  WalRecordBuilder *pRec = tw_rec(1, "t", "failed", "v");
  const char *az[1] = {"t"};
  int an[1] = {1};
  uint64_t cid = 99;
  char *zErr = 0;
  WalStats st;
  TwSeen *s;
  int i, rc;
  for(i=0; i<3; i++) tw_append(pWal, i, "t", "ok-before", "v", 1);
  wal_fault_arm(pF, c->eKind, 1, c->err, 0);
  rc = wal_append(pWal, pRec, 1, az, an, &cid, &zErr);
  ck_assert_int_eq(rc, c->rcWant);
  ck_assert_uint_eq(cid, 0);
  ck_assert_ptr_nonnull(zErr);
  ck_assert_msg(strstr(zErr, c->zWant)!=0, "%s", zErr);
  ck_assert_msg(strstr(zErr, ".log")!=0, "message names no file: %s", zErr);
  sqlite3_free(zErr);
  for(i=0; i<2; i++) tw_append(pWal, i, "t", "ok-after", "v", 1);
  wal_stats(pWal, &st);
  ck_assert_int_eq(st.nAppend, 5);
  ck_assert_int_eq(st.nUnconfirmed, 5);
  if( c->eKind==WAL_FAULT_FSYNC ){
    ck_assert_int_eq(st.nSegment, 2);    /* moved off the suspect segment */
  }
  wal_close(pWal);
  pWal = tw_open(zDir);
  s = tw_replay(pWal, 0);
  ck_assert_int_eq(s->n, 5);
  for(i=0; i<5; i++){
    ck_assert_str_eq(s->azKey[i], i<3 ? "ok-before" : "ok-after");
  }
  sqlite3_free(s);
  wal_close(pWal);
  wal_record_free(pRec);
  wal_fault_free(pF);
  sqlite3_free(zDir);
}
END_TEST

/* ------------------------------------------------- deferred flushes */

/* Appends a one-put record with durability eSync; returns its CID. */
static uint64_t tw_append_sync(Wal *pWal, int eSync, const char *zKey){
  WalRecordBuilder *pRec = tw_rec(1, "t", zKey, "v");
  uint64_t cid = 0;
  char *zErr = 0;
  int rc = wal_append_sync(pWal, pRec, eSync, 0, 0, 0, &cid, &zErr);
  ck_assert_msg(rc==SQLITE_OK, "wal_append_sync: rc=%d %s", rc,
                zErr ? zErr : "");
  wal_record_free(pRec);
  return cid;
}

/* NORMAL appends write without a flush; a FULL append flushes once and
** makes every record before it durable. */
START_TEST(test_wal_normal_append_defers_flush_until_full){
  char *zDir = th_tmpdir("walnormal");
  WalFault *pF = wal_fault_new(0);
  Wal *pWal = tw_open_cfg(zDir, 0, 0, wal_fault_io(pF));
  WalStats st;
  uint64_t cid;
  int i, nSync, nWrite;
  tw_append_sync(pWal, WAL_SYNC_FULL, "first");  /* preallocation done */
  nSync = wal_fault_count(pF, WAL_FAULT_FSYNC);
  nWrite = wal_fault_count(pF, WAL_FAULT_WRITE);
  for(i=0; i<5; i++) cid = tw_append_sync(pWal, WAL_SYNC_NORMAL, "normal");
  ck_assert_int_eq(wal_fault_count(pF, WAL_FAULT_FSYNC), nSync);
  ck_assert_int_eq(wal_fault_count(pF, WAL_FAULT_WRITE), nWrite+5);
  wal_stats(pWal, &st);
  ck_assert_uint_eq(st.lastCid, cid);
  ck_assert_uint_lt(st.syncedCid, cid);
  ck_assert_int_eq(st.nDeferred, 5);
  cid = tw_append_sync(pWal, WAL_SYNC_FULL, "full");
  ck_assert_int_eq(wal_fault_count(pF, WAL_FAULT_FSYNC), nSync+1);
  wal_stats(pWal, &st);
  ck_assert_uint_eq(st.syncedCid, cid);
  wal_close(pWal);
  wal_fault_free(pF);
  sqlite3_free(zDir);
}
END_TEST

/* wal_sync() flushes deferred records once; a second call finds them
** durable and flushes nothing. */
START_TEST(test_wal_sync_flushes_deferred_records){
  char *zDir = th_tmpdir("walsync");
  WalFault *pF = wal_fault_new(0);
  Wal *pWal = tw_open_cfg(zDir, 0, 0, wal_fault_io(pF));
  WalStats st;
  uint64_t cid;
  int nSync;
  char *zErr = 0;
  tw_append_sync(pWal, WAL_SYNC_FULL, "first");
  cid = tw_append_sync(pWal, WAL_SYNC_NORMAL, "a");
  tw_append_sync(pWal, WAL_SYNC_NORMAL, "b");
  nSync = wal_fault_count(pF, WAL_FAULT_FSYNC);
  ck_assert_int_eq(wal_sync(pWal, cid, &zErr), SQLITE_OK);
  ck_assert_int_eq(wal_fault_count(pF, WAL_FAULT_FSYNC), nSync+1);
  wal_stats(pWal, &st);
  ck_assert_uint_eq(st.syncedCid, cid+1);   /* the flush covers "b" too */
  ck_assert_int_eq(wal_sync(pWal, 0, &zErr), SQLITE_OK);
  ck_assert_int_eq(wal_fault_count(pF, WAL_FAULT_FSYNC), nSync+1);
  wal_close(pWal);
  wal_fault_free(pF);
  sqlite3_free(zDir);
}
END_TEST

/* Deferred records are flushed before their segment is sealed: a
** rotation flushes the old segment. */
START_TEST(test_wal_rotation_flushes_deferred_records){
  char *zDir = th_tmpdir("walnormalrot");
  WalFault *pF = wal_fault_new(0);
  Wal *pWal = tw_open_cfg(zDir, 4096, 0, wal_fault_io(pF));
  WalStats st;
  uint64_t cidFirst, cidLast = 0;
  int i;
  cidFirst = tw_append_sync(pWal, WAL_SYNC_NORMAL, "r");
  for(i=0; i<200; i++) cidLast = tw_append_sync(pWal, WAL_SYNC_NORMAL, "r");
  wal_stats(pWal, &st);
  /* 200 records fill several 4 KiB segments; every sealed one was
  ** flushed, only the active one may lag */
  ck_assert_uint_gt(st.syncedCid, cidFirst);
  ck_assert_uint_lt(st.syncedCid, cidLast);
  ck_assert_int_eq(wal_sync(pWal, cidLast, 0), SQLITE_OK);
  wal_stats(pWal, &st);
  ck_assert_uint_eq(st.syncedCid, cidLast);
  wal_close(pWal);
  wal_fault_free(pF);
  sqlite3_free(zDir);
}
END_TEST

/* A failed flush of deferred records is reported to the caller of
** wal_sync(), stops the log (later appends fail at once), and a reopen
** replays every record acknowledged durable before it. */
START_TEST(test_wal_failed_deferred_flush_is_reported){
  char *zDir = th_tmpdir("walnormalfail");
  WalFault *pF = wal_fault_new(0);
  Wal *pWal = tw_open_cfg(zDir, 0, 0, wal_fault_io(pF));
  WalRecordBuilder *pRec = tw_rec(1, "t", "late", "v");
  uint64_t cid;
  char *zErr = 0;
  TwSeen *s;
  int i;
  for(i=0; i<3; i++) tw_append_sync(pWal, WAL_SYNC_FULL, "durable");
  tw_append_sync(pWal, WAL_SYNC_NORMAL, "deferred");
  wal_fault_arm(pF, WAL_FAULT_FSYNC, 1, EIO, 0);
  ck_assert_int_eq(wal_sync(pWal, 0, &zErr), SQLITE_IOERR_FSYNC);
  ck_assert_msg(strstr(zErr, "fdatasync")!=0, "%s", zErr);
  sqlite3_free(zErr); zErr = 0;
  ck_assert_int_eq(wal_append_sync(pWal, pRec, WAL_SYNC_NORMAL, 0, 0, 0,
                                   &cid, &zErr), SQLITE_IOERR);
  ck_assert_msg(strstr(zErr, "reopen")!=0, "%s", zErr);
  sqlite3_free(zErr); zErr = 0;
  ck_assert_int_eq(wal_sync(pWal, 0, &zErr), SQLITE_IOERR);
  sqlite3_free(zErr);
  wal_close(pWal);
  pWal = tw_open(zDir);
  s = tw_replay(pWal, 0);
  /* the durable records; the deferred one may follow (it was written) */
  ck_assert_int_ge(s->n, 3);
  ck_assert_int_le(s->n, 4);
  for(i=0; i<3; i++) ck_assert_str_eq(s->azKey[i], "durable");
  sqlite3_free(s);
  wal_close(pWal);
  wal_record_free(pRec);
  wal_fault_free(pF);
  sqlite3_free(zDir);
}
END_TEST

/* wal_advance_cid() moves the next CID past a given one, never back. */
START_TEST(test_wal_advance_cid){
  char *zDir = th_tmpdir("waladvance");
  Wal *pWal = tw_open(zDir);
  uint64_t cid = tw_append_sync(pWal, WAL_SYNC_FULL, "a");
  wal_advance_cid(pWal, cid+10);
  ck_assert_uint_eq(tw_append_sync(pWal, WAL_SYNC_FULL, "b"), cid+11);
  wal_advance_cid(pWal, 1);
  ck_assert_uint_eq(tw_append_sync(pWal, WAL_SYNC_FULL, "c"), cid+12);
  wal_close(pWal);
  sqlite3_free(zDir);
}
END_TEST

/* The flush fails and so does every later one: the cut cannot be made
** durable, the log enters the failed state, appends fail fast, and the
** store reopens with every acknowledged record. */
START_TEST(test_wal_unrepairable_fault_enters_failed_state){
  char *zDir = th_tmpdir("walfailed");
  WalFault *pF = wal_fault_new(0);
  Wal *pWal = tw_open_cfg(zDir, 0, 0, wal_fault_io(pF));
  WalRecordBuilder *pRec = tw_rec(1, "t", "failed", "v");
  const char *az[1] = {"t"};
  int an[1] = {1};
  uint64_t cid;
  char *zErr = 0;
  TwSeen *s;
  int i, nWrite;
  for(i=0; i<3; i++) tw_append(pWal, i, "t", "ok", "v", 1);
  if( _i==0 ){
    wal_fault_arm(pF, WAL_FAULT_FSYNC, 1, EIO, 1);
  }else{
    wal_fault_arm(pF, WAL_FAULT_WRITE, 1, ENOSPC, 0);
    wal_fault_arm(pF, WAL_FAULT_TRUNCATE, 1, EIO, 0);
  }
  ck_assert_int_eq(wal_append(pWal, pRec, 1, az, an, &cid, &zErr),
                   _i==0 ? SQLITE_IOERR_FSYNC : SQLITE_FULL);
  ck_assert_msg(strstr(zErr, "until reopened")!=0, "%s", zErr);
  sqlite3_free(zErr); zErr = 0;
  nWrite = wal_fault_count(pF, WAL_FAULT_WRITE);
  ck_assert_int_eq(wal_append(pWal, pRec, 1, az, an, &cid, &zErr),
                   SQLITE_IOERR);
  ck_assert_msg(strstr(zErr, "reopen")!=0, "%s", zErr);
  ck_assert_int_eq(wal_fault_count(pF, WAL_FAULT_WRITE), nWrite); /* fast */
  sqlite3_free(zErr);
  wal_close(pWal);
  pWal = tw_open(zDir);
  s = tw_replay(pWal, 0);
  /* the three acknowledged records; the failed one may follow whole */
  ck_assert_int_ge(s->n, 3);
  ck_assert_int_le(s->n, 4);
  for(i=0; i<3; i++) ck_assert_str_eq(s->azKey[i], "ok");
  if( s->n==4 ) ck_assert_str_eq(s->azKey[3], "failed");
  sqlite3_free(s);
  tw_append(pWal, 1, "t", "k", "v", 1);
  wal_close(pWal);
  wal_record_free(pRec);
  wal_fault_free(pF);
  sqlite3_free(zDir);
}
END_TEST

/* After a failed flush the next append must start a new segment; if
** creating it fails, that append fails, nothing is left behind, and the
** append after it retries the rotation. */
START_TEST(test_wal_failed_rotation_is_retried){
  char *zDir = th_tmpdir("walrotfail");
  WalFault *pF = wal_fault_new(0);
  Wal *pWal = tw_open_cfg(zDir, 0, 0, wal_fault_io(pF));
  WalRecordBuilder *pRec = tw_rec(1, "t", "failed", "v");
  char *zSeg2 = tw_seg_path(zDir, 2);
  uint64_t cid;
  char *zErr = 0;
  WalStats st;
  TwSeen *s;
  tw_append(pWal, 1, "t", "ok-1", "v", 1);
  wal_fault_arm(pF, WAL_FAULT_FSYNC, 1, EIO, 0);
  ck_assert_int_eq(wal_append(pWal, pRec, 0, 0, 0, &cid, 0),
                   SQLITE_IOERR_FSYNC);
  wal_fault_arm(pF, WAL_FAULT_WRITE, 1, ENOSPC, 0);  /* the new header */
  ck_assert_int_eq(wal_append(pWal, pRec, 0, 0, 0, &cid, &zErr),
                   SQLITE_FULL);
  ck_assert_msg(strstr(zErr, "0000000000000002.log")!=0, "%s", zErr);
  sqlite3_free(zErr);
  ck_assert(!tw_exists(zSeg2));
  tw_append(pWal, 1, "t", "ok-2", "v", 1);
  ck_assert(tw_exists(zSeg2));
  wal_stats(pWal, &st);
  ck_assert_int_eq(st.nSegment, 2);
  wal_close(pWal);
  pWal = tw_open(zDir);
  s = tw_replay(pWal, 0);
  ck_assert_int_eq(s->n, 2);
  ck_assert_str_eq(s->azKey[0], "ok-1");
  ck_assert_str_eq(s->azKey[1], "ok-2");
  sqlite3_free(s);
  wal_close(pWal);
  wal_record_free(pRec);
  wal_fault_free(pF);
  sqlite3_free(zSeg2);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_wal_fault_counts_calls){
  WalFault *pF = wal_fault_new(0);
  char *zDir = th_tmpdir("walcount");
  Wal *pWal = tw_open_cfg(zDir, 0, 0, wal_fault_io(pF));
  int nW = wal_fault_count(pF, WAL_FAULT_WRITE);
  int nS = wal_fault_count(pF, WAL_FAULT_FSYNC);
  tw_append(pWal, 1, "t", "k", "v", 1);
  /* The first append preallocates 4 MiB first, in writes of 1 MiB of
  ** zeros, and flushes them: 4+1 writes, 1+1 flushes. */
  ck_assert_int_eq(wal_fault_count(pF, WAL_FAULT_WRITE), nW+5);
  ck_assert_int_eq(wal_fault_count(pF, WAL_FAULT_FSYNC), nS+2);
  tw_append(pWal, 1, "t", "k", "v", 1);
  ck_assert_int_eq(wal_fault_count(pF, WAL_FAULT_WRITE), nW+6);
  ck_assert_int_eq(wal_fault_count(pF, WAL_FAULT_FSYNC), nS+3);
  wal_fault_arm(pF, WAL_FAULT_WRITE, 2, EIO, 0);
  tw_append(pWal, 1, "t", "k", "v", 1);           /* 1st write passes */
  {
    WalRecordBuilder *pRec = tw_rec(1, "t", "k", "v");
    uint64_t cid;
    ck_assert_int_eq(wal_append(pWal, pRec, 0, 0, 0, &cid, 0),
                     SQLITE_IOERR_WRITE);          /* 2nd write fails */
    wal_fault_arm(pF, WAL_FAULT_WRITE, 1, EIO, 0);
    wal_fault_arm(pF, WAL_FAULT_WRITE, 0, 0, 0);  /* disarmed again */
    ck_assert_int_eq(wal_append(pWal, pRec, 0, 0, 0, &cid, 0), SQLITE_OK);
    wal_record_free(pRec);
  }
  wal_close(pWal);
  wal_fault_free(pF);
  sqlite3_free(zDir);
}
END_TEST

/* -------------------------------------------------------------- SIGKILL */

/* The child appends records in a loop from nThread threads and writes each
** acknowledged CID to the pipe (8-byte writes to a pipe are atomic).
** Record tid = thread*2^32 + i carries key "k<tid>" and a value of
** (tid%500) bytes of 'a'+tid%26, so the parent can check it is whole. */
typedef struct TwKillThread TwKillThread;
struct TwKillThread { Wal *pWal; int fd; uint64_t iThread; };

static void tw_kill_record(uint64_t tid, char *zKey, int nKey, char *aVal,
                           int *pnVal){
  snprintf(zKey, nKey, "k%llu", (unsigned long long)tid);
  *pnVal = (int)(tid%500);
  memset(aVal, 'a'+(int)(tid%26), *pnVal);
}

static void *tw_kill_appender(void *pArg){
  TwKillThread *t = (TwKillThread*)pArg;
  char aVal[512];
  uint64_t i;
  for(i=1; ; i++){
    uint64_t tid = (t->iThread<<32) + i, cid;
    WalRecordBuilder *pRec = wal_record_new(tid);
    const char *az[1] = {"t"};
    int an[1] = {1};
    char zKey[32];
    int nVal;
    tw_kill_record(tid, zKey, sizeof(zKey), aVal, &nVal);
    if( pRec==0 || wal_record_table(pRec, "t", 1)
     || wal_record_action(pRec, 0, zKey, (int)strlen(zKey), aVal, nVal)
     || wal_append(t->pWal, pRec, 1, az, an, &cid, 0) ){
      _exit(4);
    }
    wal_record_free(pRec);
    if( write(t->fd, &cid, sizeof(cid))!=(ssize_t)sizeof(cid) ) _exit(5);
  }
  return 0;
}

static void tw_kill_child(const char *zDir, int fd, int nThread){
  TwKillThread aT[8];
  pthread_t aId[8];
  WalConfig cfg;
  Wal *pWal = 0;
  int i;
  memset(&cfg, 0, sizeof(cfg));
  cfg.szSegment = 16*1024;
  if( wal_open(zDir, &cfg, &pWal, 0)!=SQLITE_OK ) _exit(3);
  for(i=0; i<nThread; i++){
    aT[i].pWal = pWal;
    aT[i].fd = fd;
    aT[i].iThread = (uint64_t)i;
    if( i>0 ) pthread_create(&aId[i], 0, tw_kill_appender, &aT[i]);
  }
  tw_kill_appender(&aT[0]);
}

typedef struct TwKillCheck TwKillCheck;
struct TwKillCheck { int n; uint64_t aCid[TW_MAX_SEEN]; };

static int tw_kill_verify(void *pCtx, const WalRecord *pRec){
  TwKillCheck *c = (TwKillCheck*)pCtx;
  const WalAction *a;
  char zKey[32], aVal[512];
  int i, nVal;
  ck_assert_int_eq(pRec->nTable, 1);
  ck_assert_int_eq(pRec->aTable[0].nAction, 1);
  a = &pRec->aTable[0].aAction[0];
  tw_kill_record(pRec->tid, zKey, sizeof(zKey), aVal, &nVal);
  ck_assert_int_eq(a->nKey, (int)strlen(zKey));
  ck_assert_int_eq(memcmp(a->aKey, zKey, a->nKey), 0);
  ck_assert_int_eq(a->nVal, nVal);
  for(i=0; i<nVal; i++) ck_assert_int_eq(a->aVal[i], aVal[i]);
  if( c->n<TW_MAX_SEEN ) c->aCid[c->n++] = pRec->cid;
  return SQLITE_OK;
}

/* Kills a child that appends from nThread threads after a random delay;
** every acknowledged CID must be replayed whole, and the replayed CIDs are
** exactly 1..n (a cut only ever removes a suffix). */
static void tw_kill_once(unsigned int seed, int nThread){
  char *zDir = th_tmpdir("walkill");
  int fd[2], st;
  pid_t pid;
  uint64_t cid, maxAck = 0;
  TwKillCheck *c = sqlite3_malloc64(sizeof(TwKillCheck));
  Wal *pWal;
  char *zErr = 0;
  uint64_t i;
  ck_assert_int_eq(pipe(fd), 0);
  pid = fork();
  ck_assert_int_ge(pid, 0);
  if( pid==0 ){
    close(fd[0]);
    tw_kill_child(zDir, fd[1], nThread);
    _exit(0);
  }
  close(fd[1]);
  srand(seed);
  usleep(10000 + (rand()%90000));
  kill(pid, SIGKILL);
  while( read(fd[0], &cid, sizeof(cid))==(ssize_t)sizeof(cid) ){
    if( cid>maxAck ) maxAck = cid;
  }
  close(fd[0]);
  waitpid(pid, &st, 0);
  ck_assert_msg(WIFSIGNALED(st), "child exited early: %d", WEXITSTATUS(st));
  c->n = 0;
  pWal = tw_open_cfg(zDir, 16*1024, 0, 0);
  ck_assert_int_eq(wal_replay(pWal, tw_kill_verify, c, &zErr), SQLITE_OK);
  ck_assert_uint_ge((uint64_t)c->n, maxAck<TW_MAX_SEEN ? maxAck : TW_MAX_SEEN);
  for(i=0; i<(uint64_t)c->n; i++) ck_assert_uint_eq(c->aCid[i], i+1);
  wal_close(pWal);
  sqlite3_free(c);
  sqlite3_free(zDir);
}

START_TEST(test_wal_sigkill_keeps_every_acknowledged_record){
  const char *zIters = getenv("DEPOT_TORTURE_ITERS");
  int nIter = zIters ? atoi(zIters) : 3;
  int i;
  for(i=0; i<nIter; i++){
    tw_kill_once((unsigned int)(1000*_i + i + 1), _i==0 ? 1 : 4);
  }
}
END_TEST

/* ---------------------------------------------------------- preallocation */

/* Segment files are extended with zeros ahead of the appends (wal/append.c);
** the default 64 MiB segments grow in chunks of this size. */
#define TW_PREALLOC_CHUNK (4*1024*1024)

/* Offsets of the frames of a segment file up to the zero padding (a frame
** header of zero length), parsed independently of wal/. */
static int tw_frames_padded(const char *zPath, off_t *aOff, int nMax){
  off_t sz = tw_size(zPath), off = TW_SEG_HDR;
  int fd = open(zPath, O_RDONLY), n = 0;
  ck_assert_int_ge(fd, 0);
  while( off+8<=sz && n<nMax ){
    unsigned char h[4];
    off_t nBody;
    ck_assert_int_eq(pread(fd, h, 4, off), 4);
    nBody = h[0] | (h[1]<<8) | (h[2]<<16) | ((off_t)h[3]<<24);
    if( nBody==0 ) break;
    aOff[n++] = off;
    off += 8 + nBody;
  }
  close(fd);
  return n;
}

/* A child appends records "k1".."k<n>" to a fresh log and exits without
** closing it, so the active segment keeps its padding, as after a crash. */
static void tw_append_and_exit(const char *zDir, int n){
  pid_t pid = fork();
  int st, i;
  ck_assert_int_ge(pid, 0);
  if( pid==0 ){
    Wal *pWal = 0;
    if( wal_open(zDir, 0, &pWal, 0)!=SQLITE_OK ) _exit(3);
    for(i=0; i<n; i++){
      WalRecordBuilder *pRec = wal_record_new((uint64_t)i);
      const char *az[1] = {"t"};
      int an[1] = {1};
      char zKey[16];
      uint64_t cid;
      snprintf(zKey, sizeof(zKey), "k%d", i+1);
      if( pRec==0 || wal_record_table(pRec, "t", 1)
       || wal_record_action(pRec, 0, zKey, (int)strlen(zKey), "value", 5)
       || wal_append(pWal, pRec, 1, az, an, &cid, 0) ){
        _exit(4);
      }
      wal_record_free(pRec);
    }
    _exit(0);
  }
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st)==0, "child failed: %d", st);
}

/* Reopens zDir and checks it replays records "k1".."k<n>" then, if
** zLast, one more record with key zLast. */
static void tw_expect_keys(const char *zDir, int n, const char *zLast){
  Wal *pWal = tw_open(zDir);
  TwSeen *s = tw_replay(pWal, 0);
  int i;
  ck_assert_int_eq(s->n, n + (zLast ? 1 : 0));
  for(i=0; i<n; i++){
    char zKey[16];
    snprintf(zKey, sizeof(zKey), "k%d", i+1);
    ck_assert_str_eq(s->azKey[i], zKey);
    ck_assert_uint_eq(s->aCid[i], (uint64_t)i+1);
  }
  if( zLast ) ck_assert_str_eq(s->azKey[n], zLast);
  sqlite3_free(s);
  wal_close(pWal);
}

START_TEST(test_wal_preallocated_segment_reopens_and_appends_after_last){
  char *zDir = th_tmpdir("walpre");
  char *zPath = tw_seg_path(zDir, 1);
  off_t aOff[8], szFrames;
  Wal *pWal;
  TwSeen *s;
  tw_append_and_exit(zDir, 5);
  /* the segment was extended ahead of the appends, and kept its padding */
  ck_assert_int_eq(tw_size(zPath), TW_PREALLOC_CHUNK);
  ck_assert_int_eq(tw_frames_padded(zPath, aOff, 8), 5);
  pWal = tw_open(zDir);
  ck_assert_int_eq(tw_size(zPath), TW_PREALLOC_CHUNK);  /* nothing cut */
  s = tw_replay(pWal, 0);
  ck_assert_int_eq(s->n, 5);
  ck_assert_str_eq(s->azKey[4], "k5");
  sqlite3_free(s);
  ck_assert_uint_eq(tw_append(pWal, 9, "t", "after", "v", 1), 6);
  ck_assert_int_eq(tw_size(zPath), TW_PREALLOC_CHUNK);  /* no growth */
  ck_assert_int_eq(tw_frames_padded(zPath, aOff, 8), 6);
  wal_close(pWal);
  /* a clean close trims the padding: the file ends after the 6th frame */
  ck_assert_int_eq(tw_frames(zPath, aOff, 8), 6);
  szFrames = tw_size(zPath);
  ck_assert_int_lt(szFrames, 4096);
  tw_expect_keys(zDir, 5, "after");
  sqlite3_free(zPath);
  sqlite3_free(zDir);
}
END_TEST

/* Zeros over the end of the last frame (a torn write), or over the header
** of frame 3 with frames 4 and 5 intact after it: not padding, since
** non-zero bytes follow or the frame fails its checks.  The newest
** segment is cut at the damaged frame, padding and all. */
START_TEST(test_wal_torn_record_before_padding_is_cut){
  static const unsigned char aZero[8] = {0};
  char *zDir = th_tmpdir("walpretorn");
  char *zPath = tw_seg_path(zDir, 1);
  off_t aOff[8];
  int fd, iBad = _i==0 ? 4 : 2;
  Wal *pWal;
  tw_append_and_exit(zDir, 5);
  ck_assert_int_eq(tw_frames_padded(zPath, aOff, 8), 5);
  fd = open(zPath, O_RDWR);
  ck_assert_int_ge(fd, 0);
  if( _i==0 ){
    ck_assert_int_eq(pwrite(fd, aZero, 3, aOff[4]+8+10), 3);
  }else{
    ck_assert_int_eq(pwrite(fd, aZero, 8, aOff[2]), 8);
  }
  close(fd);
  pWal = tw_open(zDir);
  ck_assert_int_eq(tw_size(zPath), aOff[iBad]);
  ck_assert_uint_eq(tw_append(pWal, 9, "t", "after", "v", 1),
                    (uint64_t)iBad+1);
  wal_close(pWal);
  tw_expect_keys(zDir, iBad, "after");
  sqlite3_free(zPath);
  sqlite3_free(zDir);
}
END_TEST

/* Zeros from the end of the frames of an older (sealed) segment are
** padding there too: a crash may leave a sealed segment untrimmed. */
START_TEST(test_wal_padding_in_older_segment_is_not_corrupt){
  char *zDir = th_tmpdir("walpreold");
  char *zPath = tw_seg_path(zDir, 1);
  Wal *pWal = tw_segments(zDir, 20, 0);
  static const unsigned char aZero[4096] = {0};
  TwSeen *s;
  wal_close(pWal);
  ck_assert(tw_exists(zPath));
  tw_append_bytes(zPath, aZero, sizeof(aZero));
  pWal = tw_open_cfg(zDir, 200, 0, 0);
  s = tw_replay(pWal, 0);
  ck_assert_int_eq(s->n, 20);
  ck_assert_str_eq(s->azKey[19], "key-020");
  sqlite3_free(s);
  wal_close(pWal);
  sqlite3_free(zPath);
  sqlite3_free(zDir);
}
END_TEST

/* A WalIo that kills its own process with SIGKILL right after the flush
** of the nKillAt-th preallocation (a zero write of a page or more), before
** the group that needed the space is written. */
typedef struct TwKillIo TwKillIo;
struct TwKillIo { WalIo io; const WalIo *pBase; int bZero; int nExt, nKillAt; };

static ssize_t tw_killio_pwrite(void *pCtx, int fd, const void *p, size_t n,
                                off_t off){
  TwKillIo *t = (TwKillIo*)pCtx;
  const unsigned char *a = (const unsigned char*)p;
  if( n>=4096 && a[0]==0 && memcmp(a, a+1, n-1)==0 ) t->bZero = 1;
  return t->pBase->xPwrite(t->pBase->pCtx, fd, p, n, off);
}

static int tw_killio_fsync(void *pCtx, int fd){
  TwKillIo *t = (TwKillIo*)pCtx;
  int rc = t->pBase->xFsync(t->pBase->pCtx, fd);
  if( t->bZero ){
    t->bZero = 0;
    if( ++t->nExt==t->nKillAt ) kill(getpid(), SIGKILL);
  }
  return rc;
}

static void tw_killio_child(const char *zDir, int fd, int nKillAt){
  static TwKillIo t;
  WalConfig cfg;
  TwKillThread th;
  Wal *pWal = 0;
  t.pBase = wal_io_posix();
  t.io = *t.pBase;
  t.io.pCtx = &t;
  t.io.xPwrite = tw_killio_pwrite;
  t.io.xFsync = tw_killio_fsync;
  t.nKillAt = nKillAt;
  memset(&cfg, 0, sizeof(cfg));
  cfg.szSegment = 16*1024;
  cfg.pIo = &t.io;
  if( wal_open(zDir, &cfg, &pWal, 0)!=SQLITE_OK ) _exit(3);
  th.pWal = pWal;
  th.fd = fd;
  th.iThread = 0;
  tw_kill_appender(&th);
}

START_TEST(test_wal_sigkill_after_chunk_extension_loses_nothing){
  char *zDir = th_tmpdir("walprekill");
  TwKillCheck *c = sqlite3_malloc64(sizeof(TwKillCheck));
  int fd[2], st;
  uint64_t cid, nAck = 0, i;
  Wal *pWal;
  char *zErr = 0;
  pid_t pid;
  ck_assert_int_eq(pipe(fd), 0);
  pid = fork();
  ck_assert_int_ge(pid, 0);
  if( pid==0 ){
    close(fd[0]);
    tw_killio_child(zDir, fd[1], 1 + 2*_i);
    _exit(0);
  }
  close(fd[1]);
  while( read(fd[0], &cid, sizeof(cid))==(ssize_t)sizeof(cid) ){
    ck_assert_uint_eq(cid, nAck+1);
    nAck = cid;
  }
  close(fd[0]);
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st)==SIGKILL,
                "child did not die by SIGKILL: %d", st);
  if( _i>0 ) ck_assert_uint_gt(nAck, 0);
  c->n = 0;
  pWal = tw_open_cfg(zDir, 16*1024, 0, 0);
  ck_assert_int_eq(wal_replay(pWal, tw_kill_verify, c, &zErr), SQLITE_OK);
  ck_assert_uint_eq((uint64_t)c->n, nAck);   /* the killed group never ran */
  for(i=0; i<(uint64_t)c->n; i++) ck_assert_uint_eq(c->aCid[i], i+1);
  ck_assert_uint_eq(tw_append(pWal, 1, "t", "after", "v", 1), nAck+1);
  wal_close(pWal);
  sqlite3_free(c);
  sqlite3_free(zDir);
}
END_TEST

/* The preallocation's zero write or its flush fails: the append fails with
** a message naming the segment, the acknowledged records stay, later
** appends work, and the store reopens with exactly those records. */
static const TwFaultCase aPreFault[] = {
  { WAL_FAULT_WRITE, EIO,    SQLITE_IOERR_WRITE, "Input/output error" },
  { WAL_FAULT_WRITE, ENOSPC, SQLITE_FULL,        "No space left" },
  { WAL_FAULT_SHORT, 0,      SQLITE_IOERR_WRITE, "preallocation" },
  { WAL_FAULT_FSYNC, EIO,    SQLITE_IOERR_FSYNC, "fdatasync" },
};

START_TEST(test_wal_failed_preallocation_fails_the_append){
  const TwFaultCase *c = &aPreFault[_i];
  char *zDir = th_tmpdir("walprefault");
  char *zPath = tw_seg_path(zDir, 1);
  WalFault *pF = wal_fault_new(0);
  Wal *pWal = tw_open_cfg(zDir, 0, 0, wal_fault_io(pF));
  WalRecordBuilder *pRec = tw_rec(1, "t", "failed", "v");
  const char *az[1] = {"t"};
  int an[1] = {1};
  uint64_t cid = 99;
  char *zErr = 0;
  off_t szFrames;
  WalStats st;
  int i;
  for(i=0; i<2; i++) tw_append(pWal, i, "t", "ok-before", "v", 1);
  wal_close(pWal);                        /* trimmed: the next append */
  szFrames = tw_size(zPath);              /* must extend the file again */
  pWal = tw_open_cfg(zDir, 0, 0, wal_fault_io(pF));
  wal_fault_arm(pF, c->eKind, 1, c->err, 1);  /* sticky: the fallback of */
  ck_assert_int_eq(wal_append(pWal, pRec, 1, az, an, &cid, &zErr),
                   c->rcWant);                /* ENOSPC fails as well */
  wal_fault_arm(pF, c->eKind, 0, 0, 0);
  ck_assert_uint_eq(cid, 0);
  ck_assert_ptr_nonnull(zErr);
  ck_assert_msg(strstr(zErr, "preallocation")!=0, "%s", zErr);
  ck_assert_msg(strstr(zErr, c->zWant)!=0, "%s", zErr);
  ck_assert_msg(strstr(zErr, "0000000000000001.log")!=0, "%s", zErr);
  sqlite3_free(zErr);
  ck_assert_int_eq(tw_size(zPath), szFrames);   /* extension cut off */
  tw_append(pWal, 5, "t", "ok-after", "v", 1);
  wal_stats(pWal, &st);
  ck_assert_int_eq(st.nSegment, c->eKind==WAL_FAULT_FSYNC ? 2 : 1);
  wal_close(pWal);
  pWal = tw_open(zDir);
  {
    TwSeen *s = tw_replay(pWal, 0);
    ck_assert_int_eq(s->n, 3);
    ck_assert_str_eq(s->azKey[0], "ok-before");
    ck_assert_str_eq(s->azKey[1], "ok-before");
    ck_assert_str_eq(s->azKey[2], "ok-after");
    sqlite3_free(s);
  }
  wal_close(pWal);
  wal_record_free(pRec);
  wal_fault_free(pF);
  sqlite3_free(zPath);
  sqlite3_free(zDir);
}
END_TEST

/* The disk has room for the record but not for a whole preallocation
** chunk (the chunk's zero write fails with ENOSPC): the segment is
** extended only as far as the record needs and the append succeeds, so a
** store whose disk is nearly full keeps taking small commits; the record
** is replayed after reopening. */
/* The errors that mean "no room": a full disk, a file past the process's
** RLIMIT_FSIZE (SIGXFSZ ignored), a full disk quota. */
static const int aNoRoomErr[] = { ENOSPC, EFBIG,
#ifdef EDQUOT
  EDQUOT,
#else
  ENOSPC,
#endif
};

START_TEST(test_wal_preallocation_without_room_for_a_chunk_extends_less){
  char *zDir = th_tmpdir("walprefull");
  char *zPath = tw_seg_path(zDir, 1);
  WalFault *pF = wal_fault_new(0);
  Wal *pWal = tw_open_cfg(zDir, 0, 0, wal_fault_io(pF));
  int nWrite;
  tw_append(pWal, 0, "t", "ok-before", "v", 1);
  wal_close(pWal);                        /* trimmed: the next append */
  pWal = tw_open_cfg(zDir, 0, 0, wal_fault_io(pF));   /* must extend */
  nWrite = wal_fault_count(pF, WAL_FAULT_WRITE);
  wal_fault_arm(pF, WAL_FAULT_WRITE, 1, aNoRoomErr[_i], 0);
  tw_append(pWal, 1, "t", "fits", "v", 1);  /* fails the test on error */
  ck_assert_int_gt(wal_fault_count(pF, WAL_FAULT_WRITE), nWrite + 2);
  ck_assert_int_lt(tw_size(zPath), 64*1024);  /* not a 4 MiB chunk */
  tw_append(pWal, 2, "t", "next", "v", 1);
  wal_close(pWal);
  pWal = tw_open(zDir);
  {
    TwSeen *s = tw_replay(pWal, 0);
    ck_assert_int_eq(s->n, 3);
    ck_assert_str_eq(s->azKey[0], "ok-before");
    ck_assert_str_eq(s->azKey[1], "fits");
    ck_assert_str_eq(s->azKey[2], "next");
    sqlite3_free(s);
  }
  wal_close(pWal);
  wal_fault_free(pF);
  sqlite3_free(zPath);
  sqlite3_free(zDir);
}
END_TEST

/* A real child limited by RLIMIT_FSIZE far below a preallocation chunk:
** the chunk's zero write comes back short at the limit and the rest fails
** with EFBIG, so the segment is extended only as far as each record needs
** and the appends succeed until the records themselves reach the limit;
** then they fail with SQLITE_FULL, and the reopened log holds exactly the
** acknowledged records. */
START_TEST(test_wal_file_size_limit_below_a_chunk_takes_small_appends){
  char *zDir = th_tmpdir("walfsize");
  int fds[2], st, nAck = 0, v;
  pid_t pid;
  ck_assert_int_eq(pipe(fds), 0);
  pid = fork();
  ck_assert_int_ge(pid, 0);
  if( pid==0 ){
    struct rlimit rl;
    Wal *pWal = 0;
    WalConfig cfg;
    char *zErr = 0;
    int i, rc = SQLITE_OK;
    close(fds[0]);
    signal(SIGXFSZ, SIG_IGN);
    memset(&cfg, 0, sizeof(cfg));
    if( wal_open(zDir, &cfg, &pWal, &zErr)!=SQLITE_OK ) _exit(2);
    rl.rlim_cur = rl.rlim_max = 256*1024;
    if( setrlimit(RLIMIT_FSIZE, &rl) ) _exit(3);
    for(i=0; i<1000 && rc==SQLITE_OK; i++){
      char zKey[32], zVal[1000];
      WalRecordBuilder *pRec = wal_record_new((uint64_t)i);
      uint64_t cid = 0;
      snprintf(zKey, sizeof(zKey), "k%d", i);
      memset(zVal, 'v', sizeof(zVal));
      if( pRec==0 || wal_record_table(pRec, "t", 1)
       || wal_record_action(pRec, 0, zKey, (int)strlen(zKey), zVal,
                            (int)sizeof(zVal)) ) _exit(4);
      rc = wal_append(pWal, pRec, 0, 0, 0, &cid, &zErr);
      wal_record_free(pRec);
      if( rc==SQLITE_OK && write(fds[1], &i, sizeof(i))!=sizeof(i) ) _exit(5);
    }
    /* the records reached the limit: a full disk, not an I/O error */
    _exit(rc==SQLITE_FULL ? 0 : 6);
  }
  close(fds[1]);
  while( read(fds[0], &v, sizeof(v))==sizeof(v) ){
    ck_assert_int_eq(v, nAck);
    nAck++;
  }
  close(fds[0]);
  waitpid(pid, &st, 0);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st)==0, "child status %d", st);
  ck_assert_int_gt(nAck, 200);        /* ~1 KiB records in 256 KiB */
  {
    Wal *pWal = tw_open(zDir);
    TwSeen *s = tw_replay(pWal, 0);
    ck_assert_int_eq(s->n, nAck);
    sqlite3_free(s);
    wal_close(pWal);
  }
  sqlite3_free(zDir);
}
END_TEST

/* ------------------------------------------------------------- the suite */

/* ------------------------------------------------------ abort records */

/* An abort record decodes with the CID it withdraws; a bad tag, a CID at
** or above the record's own, or trailing bytes are corrupt. */
START_TEST(test_wal_decode_abort_record){
  static const uint8_t aGood[] = {0x09, 0x07, 0x00, 0x01, 0x03};
  static const uint8_t aBadTag[] = {0x09, 0x07, 0x00, 0x02, 0x03};
  static const uint8_t aFuture[] = {0x09, 0x07, 0x00, 0x01, 0x09};
  static const uint8_t aZero[] = {0x09, 0x07, 0x00, 0x01, 0x00};
  static const uint8_t aTrail[] = {0x09, 0x07, 0x00, 0x01, 0x03, 0x00};
  static const uint8_t aShort[] = {0x09, 0x07, 0x00, 0x01};
  static const uint8_t aTabled[] = {0x09, 0x07, 0x01, 0x01, 't', 0, 0, 0, 0,
                                    0x01, 0x03};
  WalRecord *pRec = 0;
  ck_assert_int_eq(wal_record_decode(aGood, sizeof(aGood), &pRec),
                   SQLITE_OK);
  ck_assert_uint_eq(pRec->cid, 9);
  ck_assert_uint_eq(pRec->tid, 7);
  ck_assert_int_eq(pRec->nTable, 0);
  ck_assert_uint_eq(pRec->cidAborted, 3);
  sqlite3_free(pRec);
  ck_assert_int_eq(wal_record_decode(aBadTag, sizeof(aBadTag), &pRec),
                   SQLITE_CORRUPT);
  ck_assert_int_eq(wal_record_decode(aFuture, sizeof(aFuture), &pRec),
                   SQLITE_CORRUPT);
  ck_assert_int_eq(wal_record_decode(aZero, sizeof(aZero), &pRec),
                   SQLITE_CORRUPT);
  ck_assert_int_eq(wal_record_decode(aTrail, sizeof(aTrail), &pRec),
                   SQLITE_CORRUPT);
  ck_assert_int_eq(wal_record_decode(aShort, sizeof(aShort), &pRec),
                   SQLITE_CORRUPT);
  ck_assert_int_eq(wal_record_decode(aTabled, sizeof(aTabled), &pRec),
                   SQLITE_CORRUPT);
  ck_assert_ptr_null(pRec);
}
END_TEST

/* Withdraws cid, asserting success. */
static void tw_abort(Wal *pWal, uint64_t cid, uint64_t tid){
  char *zErr = 0;
  int rc = wal_abort(pWal, cid, tid, &zErr);
  ck_assert_msg(rc==SQLITE_OK, "wal_abort: rc=%d %s", rc, zErr ? zErr : "");
}

/* A withdrawn record is confirmed at once and never replayed again. */
START_TEST(test_wal_aborted_record_is_not_replayed){
  char *zDir = th_tmpdir("walabort");
  Wal *pWal = tw_open(zDir);
  WalStats st;
  TwSeen *s;
  ck_assert_uint_eq(tw_append(pWal, 1, "t", "a", "1", 1), 1);
  ck_assert_uint_eq(tw_append(pWal, 2, "t", "b", "2", 1), 2);
  ck_assert_uint_eq(tw_append(pWal, 3, "t", "c", "3", 1), 3);
  tw_abort(pWal, 2, 2);
  wal_stats(pWal, &st);
  ck_assert_int_eq(st.nUnconfirmed, 2);
  ck_assert_int_eq(st.nAppend, 4);
  ck_assert_uint_eq(st.lastCid, 4);       /* the abort took CID 4 */
  wal_close(pWal);
  pWal = tw_open(zDir);
  wal_stats(pWal, &st);
  ck_assert_int_eq(st.nUnconfirmed, 2);
  s = tw_replay(pWal, 0);
  ck_assert_int_eq(s->n, 2);
  ck_assert_uint_eq(s->aCid[0], 1);
  ck_assert_uint_eq(s->aCid[1], 3);
  sqlite3_free(s);
  ck_assert_uint_eq(tw_append(pWal, 5, "t", "d", "4", 1), 5);
  wal_close(pWal);
  sqlite3_free(zDir);
}
END_TEST

/* The abort lands segments after its record: the open scan still sees it
** before replay, and the record's segment retires once the rest of it is
** confirmed. */
START_TEST(test_wal_abort_in_later_segment){
  char *zDir = th_tmpdir("walabortseg");
  Wal *pWal = tw_segments(zDir, 20, 0);
  char *zSeg1 = tw_seg_path(zDir, 1);
  WalStats st;
  TwSeen *s;
  int i;
  wal_stats(pWal, &st);
  ck_assert_int_ge(st.nSegment, 3);
  tw_abort(pWal, 1, 0);                 /* record 1 is in segment 1 */
  wal_close(pWal);
  pWal = tw_open_cfg(zDir, 200, 0, 0);
  s = tw_replay(pWal, 0);
  ck_assert_int_eq(s->n, 19);
  for(i=0; i<19; i++) ck_assert_uint_eq(s->aCid[i], (uint64_t)i+2);
  ck_assert(tw_exists(zSeg1));
  for(i=0; i<19; i++) wal_confirm(pWal, s->aCid[i], "t", 1);
  ck_assert(!tw_exists(zSeg1));        /* record 1 needs no confirmation */
  sqlite3_free(s);
  wal_close(pWal);
  pWal = tw_open_cfg(zDir, 200, 0, 0);
  s = tw_replay(pWal, 0);
  ck_assert_int_eq(s->n, 0);
  sqlite3_free(s);
  wal_close(pWal);
  sqlite3_free(zSeg1);
  sqlite3_free(zDir);
}
END_TEST

/* Retirement: every other record of segments 1 and 2 confirmed, the last
** unconfirmed one withdrawn - both segments retire at once. */
START_TEST(test_wal_retirement_with_aborted_records){
  char *zDir = th_tmpdir("walabortret");
  Wal *pWal = tw_segments(zDir, 20, 0);
  char *zSeg1 = tw_seg_path(zDir, 1);
  char *zSeg2 = tw_seg_path(zDir, 2);
  off_t aOff[16];
  int n1 = tw_frames(zSeg1, aOff, 16);
  int n2 = tw_frames(zSeg2, aOff, 16);
  uint64_t cid;
  TwSeen *s;
  for(cid=2; cid<=(uint64_t)(n1+n2); cid++) wal_confirm(pWal, cid, "t", 1);
  ck_assert(tw_exists(zSeg1));
  ck_assert(tw_exists(zSeg2));
  tw_abort(pWal, 1, 0);
  ck_assert(!tw_exists(zSeg1));
  ck_assert(!tw_exists(zSeg2));
  wal_close(pWal);
  pWal = tw_open_cfg(zDir, 200, 0, 0);
  s = tw_replay(pWal, 0);
  ck_assert_int_eq(s->n, 20 - n1 - n2);
  ck_assert_uint_eq(s->aCid[0], (uint64_t)(n1+n2+1));
  sqlite3_free(s);
  wal_close(pWal);
  sqlite3_free(zSeg1); sqlite3_free(zSeg2);
  sqlite3_free(zDir);
}
END_TEST

/* A failed abort withdraws nothing: the record stays unconfirmed and is
** replayed at the next open (the caller must report it). */
START_TEST(test_wal_failed_abort_keeps_record){
  char *zDir = th_tmpdir("walabortfail");
  WalFault *pF = wal_fault_new(wal_io_posix());
  Wal *pWal = tw_open_cfg(zDir, 0, 0, wal_fault_io(pF));
  WalStats st;
  char *zErr = 0;
  TwSeen *s;
  int rc;
  ck_assert_uint_eq(tw_append(pWal, 1, "t", "a", "1", 1), 1);
  wal_fault_arm(pF, WAL_FAULT_WRITE, 1, ENOSPC, 0);
  rc = wal_abort(pWal, 1, 1, &zErr);
  ck_assert_int_eq(rc, SQLITE_FULL);
  ck_assert_ptr_nonnull(zErr);
  sqlite3_free(zErr);
  wal_stats(pWal, &st);
  ck_assert_int_eq(st.nUnconfirmed, 1);
  wal_close(pWal);
  pWal = tw_open(zDir);
  s = tw_replay(pWal, 0);
  ck_assert_int_eq(s->n, 1);
  ck_assert_uint_eq(s->aCid[0], 1);
  sqlite3_free(s);
  wal_close(pWal);
  wal_fault_free(pF);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_wal_abort_rejects_misuse){
  char *zDir = th_tmpdir("walabortmis");
  Wal *pWal = tw_open(zDir);
  char *zErr = 0;
  tw_append(pWal, 1, "t", "a", "1", 1);
  ck_assert_int_eq(wal_abort(0, 1, 1, 0), SQLITE_MISUSE);
  ck_assert_int_eq(wal_abort(pWal, 0, 1, 0), SQLITE_MISUSE);
  ck_assert_int_eq(wal_abort(pWal, 2, 1, &zErr), SQLITE_MISUSE);
  ck_assert_ptr_nonnull(zErr);
  ck_assert_msg(strstr(zErr, "record 2")!=0, "%s", zErr);
  sqlite3_free(zErr);
  wal_close(pWal);
  pWal = tw_open(zDir);
  {
    TwSeen *s = tw_replay(pWal, 0);
    ck_assert_int_eq(s->n, 1);
    sqlite3_free(s);
  }
  wal_close(pWal);
  sqlite3_free(zDir);
}
END_TEST

/* ------------------------------------------------- following the log */

/* A fresh TwSeen. */
static TwSeen *tw_seen(void){
  TwSeen *s = sqlite3_malloc64(sizeof(TwSeen));
  ck_assert_ptr_nonnull(s);
  memset(s, 0, sizeof(*s));
  return s;
}

/* wal_follow from *pFrom to *pTo into s, asserting rc. */
static void tw_follow(const char *zDir, WalPos *pFrom, const WalPos *pTo,
                      TwSeen *s, int rcWant){
  char *zErr = 0;
  int rc = wal_follow(zDir, 0, pFrom, pTo, tw_collect, s, &zErr);
  ck_assert_msg(rc==rcWant, "wal_follow: rc=%d (want %d) %s", rc, rcWant,
                zErr ? zErr : "");
  sqlite3_free(zErr);
}

/* A follower reads what a writer appended, across segment rotations, from
** where it stopped, abort records included, and resumes after its
** callback stops it. */
START_TEST(test_wal_follow_reads_appends_across_segments){
  char *zDir = th_tmpdir("walfollow");
  Wal *pWal = tw_open_cfg(zDir, 200, 0, 0);
  WalPos pos, to;
  uint64_t cid = 99;
  TwSeen *s = tw_seen();
  int i;
  wal_tail(pWal, &pos, &cid);
  ck_assert_uint_eq(cid, 0);
  ck_assert_uint_eq(pos.segno, 1);
  ck_assert_uint_eq(pos.iOff, TW_SEG_HDR);
  for(i=0; i<20; i++){
    char zKey[16];
    snprintf(zKey, sizeof(zKey), "key-%03d", i+1);
    tw_append(pWal, 100+i, "t", zKey, "some-value-bytes", 1);
  }
  wal_tail(pWal, &to, &cid);
  ck_assert_uint_eq(cid, 20);
  ck_assert_uint_gt(to.segno, 3);              /* it crossed segments */
  tw_follow(zDir, &pos, &to, s, SQLITE_OK);
  ck_assert_int_eq(s->n, 20);
  for(i=0; i<20; i++){
    char zKey[16];
    snprintf(zKey, sizeof(zKey), "key-%03d", i+1);
    ck_assert_uint_eq(s->aCid[i], (uint64_t)i+1);
    ck_assert_uint_eq(s->aTid[i], (uint64_t)100+i);
    ck_assert_str_eq(s->azKey[i], zKey);
  }
  ck_assert_uint_eq(pos.segno, to.segno);
  ck_assert_uint_eq(pos.iOff, to.iOff);
  tw_follow(zDir, &pos, &to, s, SQLITE_OK);    /* nothing new */
  ck_assert_int_eq(s->n, 20);

  /* Five more and a withdrawal, taken two at a time. */
  for(i=0; i<5; i++) tw_append(pWal, 200+i, "t", "more", "v", 1);
  tw_abort(pWal, 23, 202);
  wal_tail(pWal, &to, &cid);
  ck_assert_uint_eq(cid, 26);
  s->rcStopAt = 22;
  tw_follow(zDir, &pos, &to, s, SQLITE_ABORT);
  ck_assert_int_eq(s->n, 22);
  s->rcStopAt = 0;
  tw_follow(zDir, &pos, &to, s, SQLITE_OK);
  ck_assert_int_eq(s->n, 26);
  for(i=20; i<26; i++) ck_assert_uint_eq(s->aCid[i], (uint64_t)i+1);
  ck_assert_int_eq(s->nTable[25], 0);          /* the abort record */

  /* Backwards is misuse. */
  to.iOff = TW_SEG_HDR;
  to.segno = 1;
  tw_follow(zDir, &pos, &to, s, SQLITE_MISUSE);
  sqlite3_free(s);
  wal_close(pWal);
  sqlite3_free(zDir);
}
END_TEST

/* A position in a retired segment is SQLITE_NOTFOUND; a damaged frame
** below the published tail is SQLITE_CORRUPT, never the end of the log. */
START_TEST(test_wal_follow_reports_retired_and_damaged_segments){
  char *zDir = th_tmpdir("walfollowbad");
  char *zSeg = tw_seg_path(zDir, 2);
  Wal *pWal = tw_open_cfg(zDir, 200, 0, 0);
  WalPos pos, pos2, to;
  TwSeen *s = tw_seen();
  off_t aOff[8];
  char *zErr = 0;
  uint64_t cid;
  int i, rc;
  wal_tail(pWal, &pos, 0);
  for(i=0; i<20; i++) tw_append(pWal, i, "t", "key", "some-value-bytes", 1);
  wal_tail(pWal, &to, &cid);
  ck_assert_uint_gt(to.segno, 3);

  /* Damage the second frame of segment 2: a follower starting in segment
  ** 1 stops there with the file and offset. */
  ck_assert_int_ge(tw_frames(zSeg, aOff, 8), 2);
  tw_poke(zSeg, aOff[1]+12, 3);
  pos2 = pos;
  rc = wal_follow(zDir, 0, &pos2, &to, tw_collect, s, &zErr);
  ck_assert_int_eq(rc, SQLITE_CORRUPT);
  ck_assert_ptr_nonnull(zErr);
  ck_assert_ptr_nonnull(strstr(zErr, "0000000000000002.log"));
  ck_assert_uint_eq(pos2.segno, 2);            /* the records before it */
  ck_assert_int_gt(s->n, 1);
  sqlite3_free(zErr);
  zErr = 0;
  tw_poke(zSeg, aOff[1]+12, -3);

  /* Confirm everything: the sealed segments retire. */
  for(cid=1; cid<=20; cid++){
    ck_assert_int_eq(wal_confirm_record(pWal, cid), SQLITE_OK);
  }
  rc = wal_follow(zDir, 0, &pos, &to, tw_collect, s, &zErr);
  ck_assert_int_eq(rc, SQLITE_NOTFOUND);
  ck_assert_ptr_nonnull(zErr);
  ck_assert_ptr_nonnull(strstr(zErr, "retired"));
  ck_assert_uint_eq(pos.segno, 1);
  sqlite3_free(zErr);
  sqlite3_free(s);
  wal_close(pWal);
  sqlite3_free(zSeg);
  sqlite3_free(zDir);
}
END_TEST

/* Opens zDir's log in shared mode (segments of 200 bytes). */
static Wal *tw_open_shared(const char *zDir){
  WalConfig cfg;
  Wal *pWal = 0;
  char *zErr = 0;
  int rc;
  memset(&cfg, 0, sizeof(cfg));
  cfg.szSegment = 200;
  cfg.bShared = 1;
  rc = wal_open(zDir, &cfg, &pWal, &zErr);
  ck_assert_msg(rc==SQLITE_OK, "wal_open shared: rc=%d %s", rc,
                zErr ? zErr : "");
  return pWal;
}

static void tw_adopt(Wal *pWal, const WalPos *pTail, uint64_t cid){
  char *zErr = 0;
  int rc = wal_adopt_tail(pWal, pTail, cid, &zErr);
  ck_assert_msg(rc==SQLITE_OK, "wal_adopt_tail: rc=%d %s", rc,
                zErr ? zErr : "");
}

/* Two logs of one store take turns appending, each continuing from the
** tail the other published (as two processes would under the store's
** writer lock): CIDs run on without a gap, rotations by either are
** followed, nothing retires while shared, a follower reads every record,
** and an open alone afterwards replays all of them. */
START_TEST(test_wal_shared_writers_take_turns){
  char *zDir = th_tmpdir("walturns");
  Wal *pA = tw_open_cfg(zDir, 200, 0, 0), *pB;
  Wal *apW[2];
  WalPos tail, start;
  uint64_t cid = 0, c;
  TwSeen *s = tw_seen();
  int i;
  wal_set_shared(pA, 1);
  pB = tw_open_shared(zDir);
  apW[0] = pA;
  apW[1] = pB;
  wal_tail(pA, &tail, &cid);
  start = tail;
  for(i=0; i<40; i++){
    Wal *pW = apW[(i/3)%2];            /* three in a row each */
    char zKey[16];
    snprintf(zKey, sizeof(zKey), "key-%03d", i+1);
    tw_adopt(pW, &tail, cid);
    c = tw_append(pW, 500+i, "t", zKey, "some-value-bytes", 1);
    ck_assert_uint_eq(c, cid+1);
    wal_tail(pW, &tail, &cid);
    ck_assert_uint_eq(cid, c);
    ck_assert_int_eq(wal_confirm_record(pW, c), SQLITE_OK);
  }
  ck_assert_uint_gt(tail.segno, 6);
  for(i=1; i<=(int)tail.segno; i++){   /* nothing retired */
    char *zSeg = tw_seg_path(zDir, (uint64_t)i);
    ck_assert_int_gt(tw_size(zSeg), 0);
    sqlite3_free(zSeg);
  }
  tw_follow(zDir, &start, &tail, s, SQLITE_OK);
  ck_assert_int_eq(s->n, 40);
  for(i=0; i<40; i++){
    char zKey[16];
    snprintf(zKey, sizeof(zKey), "key-%03d", i+1);
    ck_assert_uint_eq(s->aCid[i], (uint64_t)i+1);
    ck_assert_str_eq(s->azKey[i], zKey);
  }
  wal_close(pB);
  wal_close(pA);
  sqlite3_free(s);
  pA = tw_open_cfg(zDir, 200, 0, 0);
  s = tw_replay(pA, 0);
  ck_assert_int_eq(s->n, 40);
  for(i=0; i<40; i++) ck_assert_uint_eq(s->aCid[i], (uint64_t)i+1);
  sqlite3_free(s);
  wal_close(pA);
  sqlite3_free(zDir);
}
END_TEST

/* A writer that dies after its append and before publishing its tail: the
** next writer finds its record with wal_follow_end() (a torn frame after
** it ends the walk), adopts the end and appends over the torn bytes; a
** leftover segment whose creation never finished is removed. */
START_TEST(test_wal_follow_end_recovers_an_unpublished_tail){
  char *zDir = th_tmpdir("walend");
  Wal *pA = tw_open_cfg(zDir, 1<<20, 0, 0), *pB;
  WalPos tail, pos, start;
  uint64_t cid = 0, cidEnd = 0;
  TwSeen *s = tw_seen();
  char *zSeg, *zNext;
  char *zErr = 0;
  int fd, rc;
  static const uint8_t aTorn[12] = {100, 0, 0, 0, 1, 2, 3, 4, 9, 9, 9, 9};
  wal_set_shared(pA, 1);
  pB = tw_open_shared(zDir);
  wal_tail(pA, &start, &cid);
  tw_append(pA, 1, "t", "a", "1", 1);
  wal_tail(pA, &tail, &cid);               /* published */
  tw_append(pA, 2, "t", "b", "2", 1);      /* written, never published */
  wal_tail(pA, &pos, 0);
  zSeg = tw_seg_path(zDir, pos.segno);
  fd = open(zSeg, O_RDWR);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(pwrite(fd, aTorn, sizeof(aTorn), (off_t)pos.iOff), 12);
  close(fd);
  zNext = tw_seg_path(zDir, pos.segno+1);  /* a rotation cut short */
  fd = open(zNext, O_RDWR|O_CREAT, 0644);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(pwrite(fd, "DEPOTWAL", 8, 0), 8);
  close(fd);

  pos = tail;
  cidEnd = cid;
  rc = wal_follow_end(zDir, 0, &pos, tw_collect, s, &cidEnd, &zErr);
  ck_assert_msg(rc==SQLITE_OK, "wal_follow_end: %d %s", rc, zErr ? zErr : "");
  ck_assert_int_eq(s->n, 1);
  ck_assert_str_eq(s->azKey[0], "b");
  ck_assert_uint_eq(cidEnd, 2);
  tw_adopt(pB, &pos, cidEnd);
  ck_assert_int_ne(access(zNext, F_OK), 0);   /* the leftover is gone */
  ck_assert_uint_eq(tw_append(pB, 3, "t", "c", "3", 1), 3);
  wal_tail(pB, &tail, &cid);
  s->n = 0;
  pos = start;
  tw_follow(zDir, &pos, &tail, s, SQLITE_OK);
  ck_assert_int_eq(s->n, 3);
  ck_assert_str_eq(s->azKey[2], "c");

  /* Adopting a tail behind the log's own end is refused. */
  ck_assert_int_eq(wal_adopt_tail(pB, &start, 0, &zErr), SQLITE_MISUSE);
  sqlite3_free(zErr);
  wal_close(pB);
  wal_close(pA);
  sqlite3_free(s);
  sqlite3_free(zSeg);
  sqlite3_free(zNext);
  sqlite3_free(zDir);
}
END_TEST

/* A shared open changes nothing: a torn frame at the end of the newest
** segment stays (it may be a write in progress), and a log that has no
** segment yet cannot be shared. */
START_TEST(test_wal_shared_open_changes_nothing){
  char *zDir = th_tmpdir("walshopen");
  char *zEmpty = th_tmpdir("walshempty");
  Wal *pA = tw_open_cfg(zDir, 1<<20, 0, 0), *pB = 0;
  WalConfig cfg;
  WalPos pos;
  char *zSeg, *zErr = 0;
  off_t sz;
  int fd;
  static const uint8_t aTorn[12] = {100, 0, 0, 0, 1, 2, 3, 4, 9, 9, 9, 9};
  tw_append(pA, 1, "t", "a", "1", 1);
  wal_tail(pA, &pos, 0);
  zSeg = tw_seg_path(zDir, pos.segno);
  fd = open(zSeg, O_RDWR);
  ck_assert_int_eq(pwrite(fd, aTorn, sizeof(aTorn), (off_t)pos.iOff), 12);
  close(fd);
  sz = tw_size(zSeg);
  pB = tw_open_shared(zDir);
  ck_assert_int_eq(tw_size(zSeg), sz);
  wal_close(pB);
  ck_assert_int_eq(tw_size(zSeg), sz);      /* no trim at close either */
  wal_close(pA);
  memset(&cfg, 0, sizeof(cfg));
  cfg.bShared = 1;
  pB = 0;
  ck_assert_int_eq(wal_open(zEmpty, &cfg, &pB, &zErr), SQLITE_CANTOPEN);
  ck_assert_ptr_null(pB);
  ck_assert_ptr_nonnull(strstr(zErr, "alone"));
  sqlite3_free(zErr);
  sqlite3_free(zSeg);
  sqlite3_free(zEmpty);
  sqlite3_free(zDir);
}
END_TEST

/* --------------------------------------------------- shared header */

static WalShared *tw_shared(const char *zDir, int bReadOnly){
  WalShared *p = 0;
  char *zErr = 0;
  int rc = wal_shared_open(zDir, bReadOnly, &p, &zErr);
  ck_assert_msg(rc==SQLITE_OK, "wal_shared_open: rc=%d %s", rc,
                zErr ? zErr : "");
  return p;
}

/* Values written by one handle read back through every handle; a
** read-only one writes nothing; a half-written header reads as busy
** until it is written again. */
START_TEST(test_wal_shared_header_round_trip){
  char *zDir = th_tmpdir("walshm");
  char *zPath = sqlite3_mprintf("%s/SHARED", zDir);
  uint64_t a[WAL_SHARED_SLOTS], b[WAL_SHARED_SLOTS];
  WalShared *p1, *p2, *pRo = 0;
  char *zErr = 0;
  int i, fd;
  ck_assert_int_eq(wal_shared_open(zDir, 1, &pRo, &zErr), SQLITE_CANTOPEN);
  ck_assert_ptr_null(pRo);
  sqlite3_free(zErr);
  zErr = 0;
  p1 = tw_shared(zDir, 0);
  p2 = tw_shared(zDir, 0);
  pRo = tw_shared(zDir, 1);
  memset(b, 0xaa, sizeof(b));
  ck_assert_int_eq(wal_shared_read(p2, b), SQLITE_OK);
  for(i=0; i<WAL_SHARED_SLOTS; i++) ck_assert_uint_eq(b[i], 0);
  for(i=0; i<WAL_SHARED_SLOTS; i++) a[i] = (uint64_t)i*1000003 + 7;
  ck_assert_int_eq(wal_shared_write(p1, a), SQLITE_OK);
  ck_assert_int_eq(wal_shared_read(p2, b), SQLITE_OK);
  ck_assert_int_eq(memcmp(a, b, sizeof(a)), 0);
  memset(b, 0, sizeof(b));
  ck_assert_int_eq(wal_shared_read(pRo, b), SQLITE_OK);
  ck_assert_int_eq(memcmp(a, b, sizeof(a)), 0);
  ck_assert_int_eq(wal_shared_write(pRo, a), SQLITE_READONLY);

  /* A writer that died half-way: copy 0 (at byte 64) differs. */
  fd = open(zPath, O_RDWR);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(pwrite(fd, "\x55", 1, 64+8*3), 1);
  close(fd);
  ck_assert_int_eq(wal_shared_read(p2, b), SQLITE_BUSY);
  a[3] = 42;
  ck_assert_int_eq(wal_shared_write(p2, a), SQLITE_OK);
  ck_assert_int_eq(wal_shared_read(p1, b), SQLITE_OK);
  ck_assert_uint_eq(b[3], 42);

  /* A file of something else is refused. */
  wal_shared_close(p1);
  wal_shared_close(p2);
  wal_shared_close(pRo);
  fd = open(zPath, O_RDWR);
  ck_assert_int_eq(pwrite(fd, "NOTSHM", 6, 0), 6);
  close(fd);
  p1 = 0;
  ck_assert_int_eq(wal_shared_open(zDir, 0, &p1, &zErr), SQLITE_CANTOPEN);
  ck_assert_ptr_nonnull(zErr);
  sqlite3_free(zErr);
  sqlite3_free(zPath);
  sqlite3_free(zDir);
}
END_TEST

/* A writer process publishes a stream of headers whose slots depend on one
** counter; a reader process meanwhile never sees a mixed header, and sees
** the counter only grow (a read that finds the writer preempted half-way
** for long may answer SQLITE_BUSY: then it reads again). */
START_TEST(test_wal_shared_header_across_processes){
  char *zDir = th_tmpdir("walshmproc");
  int nWrite = th_scaled(200000, 100);
  uint64_t a[WAL_SHARED_SLOTS];
  uint64_t iLast = 0;
  WalShared *p = tw_shared(zDir, 0);
  int i, nBusy = 0, nRead = 0, st = 0;
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if( pid==0 ){
    uint64_t k;
    for(k=1; k<=(uint64_t)nWrite; k++){
      for(i=0; i<WAL_SHARED_SLOTS; i++) a[i] = k*(uint64_t)(i+1);
      wal_shared_write(p, a);
    }
    _exit(0);
  }
  while( iLast<(uint64_t)nWrite ){
    int rc = wal_shared_read(p, a);
    if( rc==SQLITE_BUSY ){ nBusy++; continue; }
    ck_assert_int_eq(rc, SQLITE_OK);
    for(i=0; i<WAL_SHARED_SLOTS; i++){
      ck_assert_uint_eq(a[i], a[0]*(uint64_t)(i+1));
    }
    ck_assert_uint_ge(a[0], iLast);
    iLast = a[0];
    nRead++;
    if( waitpid(pid, &st, WNOHANG)==pid ){
      pid = 0;
      ck_assert_int_eq(wal_shared_read(p, a), SQLITE_OK);
      ck_assert_uint_eq(a[0], (uint64_t)nWrite);
      break;
    }
  }
  if( pid>0 ) ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert(WIFEXITED(st) && WEXITSTATUS(st)==0);
  ck_assert_int_lt(nBusy, 100);       /* only a writer preempted half-way */
  ck_assert_int_gt(nRead, 0);
  wal_shared_close(p);
  sqlite3_free(zDir);
}
END_TEST

Suite *depot_test_suite(void){
  Suite *s = suite_create("wal");
  TCase *tc = tcase_create("records");
  tcase_add_test(tc, test_wal_record_round_trip);
  tcase_add_test(tc, test_wal_record_decode_fields);
  tcase_add_test(tc, test_wal_record_many_tables);
  tcase_add_test(tc, test_wal_record_builder_rejects_misuse);
  tcase_add_test(tc, test_wal_decode_truncated_is_corrupt);
  tcase_add_test(tc, test_wal_decode_byte_flips_never_crash);
  tcase_add_test(tc, test_wal_decode_hostile_counts);
  tcase_add_test(tc, test_wal_decode_record_of_no_tables);
  tcase_add_test(tc, test_wal_crc32c_known_values);
  tcase_add_loop_test(tc, test_wal_crc32c_matches_bitwise_at_every_length_and_offset, 0, 2);
  suite_add_tcase(s, tc);
  tc = tcase_create("log");
  tcase_add_test(tc, test_wal_replay_hands_unconfirmed_in_cid_order);
  tcase_add_test(tc, test_wal_replay_twice_gives_same_sequence);
  tcase_add_test(tc, test_wal_confirm_then_reopen_replays_nothing);
  tcase_add_test(tc, test_wal_record_waits_for_every_pending_table);
  tcase_add_test(tc, test_wal_cid_survives_full_retirement);
  tcase_add_test(tc, test_wal_hold_keeps_confirmed_records_for_replay);
  tcase_add_test(tc, test_wal_replay_stops_on_callback_error);
  tcase_add_test(tc, test_wal_replay_after_append_is_misuse);
  tcase_add_test(tc, test_wal_append_inside_replay_is_misuse);
  tcase_add_test(tc, test_wal_open_rejects_bad_arguments);
  suite_add_tcase(s, tc);
  tc = tcase_create("segments");
  tcase_add_test(tc, test_wal_torn_tail_is_truncated);
  tcase_add_loop_test(tc, test_wal_garbage_tail_is_truncated, 0, 3);
  tcase_add_test(tc, test_wal_bad_crc_in_newest_tail_is_cut);
  tcase_add_test(tc, test_wal_bad_frame_in_older_segment_is_corrupt);
  tcase_add_test(tc, test_wal_bad_header_in_older_segment_is_corrupt);
  tcase_add_test(tc,
                 test_wal_older_segment_cut_at_frame_boundary_is_corrupt);
  tcase_add_loop_test(tc, test_wal_torn_segment_creation_is_replaced, 0, 3);
  tcase_add_test(tc, test_wal_rotation_by_size);
  tcase_add_loop_test(tc, test_wal_open_survives_random_damage, 0, 2);
  tcase_add_test(tc, test_wal_retirement_keeps_segment_order);
  tcase_add_test(tc, test_wal_retirement_bak_mode_renames);
  suite_add_tcase(s, tc);
  tc = tcase_create("follow");
  tcase_add_test(tc, test_wal_follow_reads_appends_across_segments);
  tcase_add_test(tc, test_wal_follow_reports_retired_and_damaged_segments);
  tcase_add_test(tc, test_wal_shared_writers_take_turns);
  tcase_add_test(tc, test_wal_follow_end_recovers_an_unpublished_tail);
  tcase_add_test(tc, test_wal_shared_open_changes_nothing);
  tcase_add_test(tc, test_wal_shared_header_round_trip);
  tcase_add_test(tc, test_wal_shared_header_across_processes);
  suite_add_tcase(s, tc);
  tc = tcase_create("concurrency");
  tcase_add_loop_test(tc, test_wal_group_commit_from_eight_threads, 0, 2);
  tcase_add_test(tc, test_wal_waiters_sleep_on_a_slow_log);
  tcase_add_test(tc, test_wal_spinning_waiters_sleep_through_a_stalled_flush);
  tcase_add_test(tc, test_wal_group_commit_on_a_fast_log);
  tcase_add_test(tc, test_wal_mixed_durability_from_eight_threads);
  tcase_add_test(tc, test_wal_normal_appends_do_not_gather);
  tcase_add_loop_test(tc, test_wal_sigkill_keeps_every_acknowledged_record,
                      0, 2);
  suite_add_tcase(s, tc);
  tc = tcase_create("faults");
  tcase_add_loop_test(tc, test_wal_injected_fault_fails_only_that_append, 0,
      (int)(sizeof(aFaultCase)/sizeof(aFaultCase[0])));
  tcase_add_loop_test(tc, test_wal_unrepairable_fault_enters_failed_state,
                      0, 2);
  tcase_add_test(tc, test_wal_failed_rotation_is_retried);
  tcase_add_test(tc, test_wal_normal_append_defers_flush_until_full);
  tcase_add_test(tc, test_wal_sync_flushes_deferred_records);
  tcase_add_test(tc, test_wal_rotation_flushes_deferred_records);
  tcase_add_test(tc, test_wal_failed_deferred_flush_is_reported);
  tcase_add_test(tc, test_wal_advance_cid);
  tcase_add_test(tc, test_wal_fault_counts_calls);
  suite_add_tcase(s, tc);
  tc = tcase_create("abort");
  tcase_add_test(tc, test_wal_decode_abort_record);
  tcase_add_test(tc, test_wal_aborted_record_is_not_replayed);
  tcase_add_test(tc, test_wal_abort_in_later_segment);
  tcase_add_test(tc, test_wal_retirement_with_aborted_records);
  tcase_add_test(tc, test_wal_failed_abort_keeps_record);
  tcase_add_test(tc, test_wal_abort_rejects_misuse);
  suite_add_tcase(s, tc);
  tc = tcase_create("preallocation");
  tcase_add_test(tc,
      test_wal_preallocated_segment_reopens_and_appends_after_last);
  tcase_add_loop_test(tc, test_wal_torn_record_before_padding_is_cut, 0, 2);
  tcase_add_test(tc, test_wal_padding_in_older_segment_is_not_corrupt);
  tcase_add_loop_test(tc, test_wal_sigkill_after_chunk_extension_loses_nothing,
                      0, 3);
  tcase_add_loop_test(tc, test_wal_failed_preallocation_fails_the_append, 0,
      (int)(sizeof(aPreFault)/sizeof(aPreFault[0])));
  tcase_add_loop_test(tc,
      test_wal_preallocation_without_room_for_a_chunk_extends_less, 0, 3);
  tcase_add_test(tc, test_wal_file_size_limit_below_a_chunk_takes_small_appends);
  suite_add_tcase(s, tc);
  return s;
}
