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
** (vfs/vfs.c): where the newest staged frame of each page sits in the
** transaction's blob, with what the commit's checksum needs: 32 bytes a
** page in a table at most 3/4 full (43..85 bytes a page), never the page
** itself. */
typedef struct TxStaged TxStaged;
struct TxStaged {
  uint32_t pgno;             /* 0: empty slot */
  uint32_t nByte;            /* frame header + stored bytes; 0: dropped */
  uint32_t iOffset;          /* of the frame from the blob's start (a
                             ** blob stays below 4 GiB) */
  uint8_t bOld;              /* the page existed in the snapshot */
  uint8_t bDead;             /* dropped, and its page index row (P, txid)
                             ** is still in the store (vfs/db.h) */
  uint64_t iCrc;             /* CRC-64 of the page */
  uint64_t iOld;             /* CRC-64 of the snapshot's page, if bOld */
};

typedef struct TxStage TxStage;
struct TxStage {
  uint32_t nSlot;            /* power of two, or 0 before the first put */
  uint32_t nUsed;
  uint32_t nDead;            /* entries with bDead */
  TxStaged *a;
};

/* Record (or replace) where page pSt->pgno is staged.  SQLITE_NOMEM
** leaves the map as it was. */
int txstage_put(TxStage*, const TxStaged *pSt);

/* The live entry of pgno, or NULL. */
const TxStaged *txstage_get(const TxStage*, uint32_t pgno);

/* Forget page pgno (its staged frame is no longer its newest version):
** the entry stays, dead, until txstage_undead() says its row is gone. */
void txstage_drop(TxStage*, uint32_t pgno);

/* Forget every page above nPage (dead, as txstage_drop()).  SQLITE_NOMEM
** leaves it unchanged. */
int txstage_truncate(TxStage*, uint32_t nPage);

/* Up to nMax page numbers of dead entries into aOut; returns how many. */
uint32_t txstage_dead(const TxStage*, uint32_t *aOut, uint32_t nMax);

/* The row of dead entry pgno is gone: forget it. */
void txstage_undead(TxStage*, uint32_t pgno);

/* Forget everything and free the memory. */
void txstage_clear(TxStage*);

/* The page numbers of the live entries, ascending, in a sqlite3_malloc'd
** array (4 bytes a page). */
int txstage_sorted_pgno(const TxStage*, uint32_t **paOut, uint32_t *pnOut);

#endif /* DEPOT_TXBUF_H */
