/*
** txbuf.h -- the write buffer of one depot write transaction (private to
** vfs/): the pages SQLite wrote since it took the RESERVED lock, keyed by
** page number, held in memory until the commit publishes them or the
** transaction ends.  Not thread-safe; owned by one file handle.
*/
#ifndef DEPOT_TXBUF_H
#define DEPOT_TXBUF_H

#include <stdint.h>

typedef struct TxBuf TxBuf;
struct TxBuf {
  uint32_t nSlot;            /* power of two, or 0 before the first put */
  uint32_t nUsed;
  uint32_t *aPgno;           /* 0: empty slot */
  unsigned char **apPage;
};

/* Store a copy of page pgno (szPage bytes), replacing an older copy.
** SQLITE_NOMEM leaves the buffer as it was. */
int txbuf_put(TxBuf*, uint32_t pgno, const void *pPage, uint32_t szPage);

/* The buffered copy of pgno, or NULL. */
unsigned char *txbuf_get(const TxBuf*, uint32_t pgno);

/* 1 if the buffer holds page pgno (of szPage bytes) and it was put again
** since its copy entered the buffer, else 0. */
int txbuf_rewritten(const TxBuf*, uint32_t pgno, uint32_t szPage);

/* Drop every page above nPage.  SQLITE_NOMEM leaves it unchanged. */
int txbuf_truncate(TxBuf*, uint32_t nPage);

/* Drop the copy of page pgno, if any. */
void txbuf_drop(TxBuf*, uint32_t pgno);

/* Drop every page and free the memory. */
void txbuf_clear(TxBuf*);

/* The buffered page numbers, ascending, in a sqlite3_malloc'd array. */
int txbuf_sorted(const TxBuf*, uint32_t **paPgno, uint32_t *pnPgno);

/* The bytes of page copies the buffer holds (pages of szPage bytes). */
int64_t txbuf_bytes(const TxBuf*, uint32_t szPage);

/* The staged pages of a write transaction whose buffer outgrew its budget
** (vfs/vfs.c): which pages are staged, one bit a page (128 KiB per 4 GiB
** of 4 KiB pages: the only memory the map spends per page), with running
** sums over them for the commit; where a staged page's frame is, and its
** CRC, are in the store (its page index row of the transaction's txid,
** vfs/db.h).  A page unstaged while its row is still in the store waits in
** aGone (at most TXSTAGE_GONE pages) until the writer removes those rows
** (vfs.c empties it before it fills up and before the commit). */
#define TXSTAGE_GONE 1024

typedef struct TxStage TxStage;
struct TxStage {
  uint32_t nWord;            /* 64-bit words in aBit */
  uint64_t *aBit;            /* bit (P-1)%64 of word (P-1)/64: P staged */
  uint32_t nLive;            /* pages staged */
  int64_t nLiveByte;         /* their newest frames' bytes */
  uint64_t iSum;             /* XOR over the staged pages of their CRC-64,
                             ** and of the snapshot's CRC-64 of those that
                             ** existed in it: the commit checksum's move */
  uint32_t nCached;          /* pages put in the decoded-page cache */
  uint32_t nSpilled;         /* pages put in its spill file */
  uint32_t nGone;            /* pages in aGone */
  uint32_t *aGone;           /* unstaged pages whose page index row is
                             ** still in the store (TXSTAGE_GONE slots) */
};

/* Room for pages up to pgno and for aGone: txstage_set() of such a page
** and txstage_unset() cannot fail then.  SQLITE_NOMEM leaves the map as
** it was. */
int txstage_reserve(TxStage*, uint32_t pgno);

/* Mark page pgno staged.  SQLITE_NOMEM leaves the map as it was. */
int txstage_set(TxStage*, uint32_t pgno);

/* 1 if page pgno is staged. */
int txstage_has(const TxStage*, uint32_t pgno);

/* Page pgno is staged no longer; with bGone its page index row is still
** in the store: it goes to aGone, which must have room (nGone below
** TXSTAGE_GONE, else SQLITE_FULL).  SQLITE_NOMEM (aGone could not be
** allocated) and SQLITE_FULL leave the map as it was. */
int txstage_unset(TxStage*, uint32_t pgno, int bGone);

/* The first staged page above pgno, or 0. */
uint32_t txstage_next(const TxStage*, uint32_t pgno);

/* Forget everything and free the memory. */
void txstage_clear(TxStage*);

/* The bytes the map holds. */
int64_t txstage_bytes(const TxStage*);

#endif /* DEPOT_TXBUF_H */
