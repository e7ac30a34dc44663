/*
** check_wal.c -- the "wal" suite: the root write-ahead log of wal/.
**
** Record encoding and the hostile-input decoder, segment scanning (torn
** tails, bad CRCs, corruption in older segments), rotation, retirement
** order and .bak mode, replay and confirmation, CID persistence, group
** commit from many threads, injected I/O faults, and a SIGKILL test
** (DEPOT_TORTURE_ITERS=n runs n kills instead of the short smoke).
*/
#include "config.h"
#include "tests/harness.h"
#include "wal/wal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------- helpers */

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
  zPath = tw_seg_path(zDir, 1);
  sz = tw_size(zPath);
  a = sqlite3_malloc64(sz);
  fd = open(zPath, O_RDONLY);
  ck_assert_int_eq(pread(fd, a, sz, 0), sz);
  close(fd);
  *pn = (size_t)(sz - 40);
  memmove(a, a+40, *pn);
  wal_close(pWal);
  sqlite3_free(zPath);
  sqlite3_free(zDir);
  return a;
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

/* ------------------------------------------------------------- the suite */

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
  tcase_add_test(tc, test_wal_crc32c_known_values);
  suite_add_tcase(s, tc);
  tc = tcase_create("log");
  tcase_add_test(tc, test_wal_replay_hands_unconfirmed_in_cid_order);
  tcase_add_test(tc, test_wal_replay_twice_gives_same_sequence);
  tcase_add_test(tc, test_wal_confirm_then_reopen_replays_nothing);
  tcase_add_test(tc, test_wal_record_waits_for_every_pending_table);
  tcase_add_test(tc, test_wal_cid_survives_full_retirement);
  tcase_add_test(tc, test_wal_replay_stops_on_callback_error);
  tcase_add_test(tc, test_wal_replay_after_append_is_misuse);
  suite_add_tcase(s, tc);
  return s;
}
