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

/* Drop every page and free the memory. */
void txbuf_clear(TxBuf*);

/* The buffered page numbers, ascending, in a sqlite3_malloc'd array. */
int txbuf_sorted(const TxBuf*, uint32_t **paPgno, uint32_t *pnPgno);

#endif /* DEPOT_TXBUF_H */
