/*
** vertxn.c -- the versioned protocol of a root transaction:
** kv_version_prepare (the read set's versions checked against the current
** ones, then the standard conflict checks, in one critical section) and
** kv_version_commit (publish, then check that the receipts name every
** final write exactly once).  The version records themselves and their
** publication are in version.c; the rules are in kv.h.
**
** Locking: the version check runs under the engine mutex, inside
** kvRootPrepareEx; the receipts are recorded under it by the publication
** and read here after the commit returns.
*/
#include "config.h"
#include "ext/kv/engine_int.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <limits.h>
#include <stdint.h>
#include <string.h>

/* ----------------------------------------------------------- prepare --- */

typedef struct KvVerCheck KvVerCheck;
struct KvVerCheck {
  const KvVerRead *aRead;
  int nRead;
};

/* xCheck of kvRootPrepareEx: compare every read version (engine mutex). */
static int vtxCheck(KvRoot *p, void *pArg){
  KvVerCheck *pC = (KvVerCheck*)pArg;
  int i, rc = SQLITE_OK;
  for(i=0; i<pC->nRead && rc==SQLITE_OK; i++){
    const KvVerRead *r = &pC->aRead[i];
    KvTable *t = kvTableFind(p->pEng, r->zTab, r->nTab);
    if( kvVersionIs(p->pEng, t, r->aKey, r->nKey, r->aVer) ) continue;
    rc = kvConflictAddKind(p, r->zTab, r->nTab, r->aKey, r->nKey,
                           KV_CONFLICT_VERSION);
  }
  return rc;
}

/* Does the root write anything (schema writes excluded)? */
static int vtxRootWrites(KvRoot *p){
  int i;
  for(i=0; i<p->nChild; i++){
    if( !p->apChild[i]->bSchema && kv_map_count(p->apChild[i]->pWrite)>0 ){
      return 1;
    }
  }
  return 0;
}

/* Every table of the read set exists for this root. */
static int vtxReadTablesExist(KvRoot *p, const KvVerRead *aRead, int nRead,
                             char **pzErr){
  int i, bFound, rc = SQLITE_OK;
  for(i=0; i<nRead && rc==SQLITE_OK; i++){
    KvMeta meta;
    if( i>0 && aRead[i].nTab==aRead[i-1].nTab
     && memcmp(aRead[i].zTab, aRead[i-1].zTab, aRead[i].nTab)==0 ){
      continue;                 /* sorted by table: checked just before */
    }
    rc = kv_name_check(aRead[i].zTab, aRead[i].nTab, pzErr);
    if( rc==SQLITE_OK ){
      rc = kv_table_meta(p->pEng, p, aRead[i].zTab, aRead[i].nTab, &meta,
                         &bFound);
      kv_meta_clear(&meta);
    }
    if( rc==SQLITE_OK && !bFound ){
      *pzErr = sqlite3_mprintf("kv: no such table: %.*s (read set element "
                               "%d)", aRead[i].nTab, aRead[i].zTab, i);
      rc = SQLITE_ERROR;
    }
  }
  return rc;
}

int kv_version_prepare(KvRoot *p, const KvVerRead *aRead, int nRead,
                       char **pzErr){
  KvVerCheck chk;
  int i, j, rc = SQLITE_OK;
  if( p->eState!=KV_ROOT_ACTIVE ) return kv_root_prepare(p, pzErr);
  if( p->eProto==KV_PROTO_ORDINARY ){
    return kv_root_protocol(p, KV_PROTO_VERSIONED, pzErr);
  }
  if( !vtxRootWrites(p) ){
    *pzErr = sqlite3_mprintf("kv: kv_prepare_with_version needs a "
        "transaction that writes (%s %llu writes nothing; check "
        "versions with kv_query_with_version)", kv_root_who(p),
        kv_root_who_id(p));
    return SQLITE_MISUSE;
  }
  rc = vtxReadTablesExist(p, aRead, nRead, pzErr);
  if( rc==SQLITE_OK ) rc = kv_root_protocol(p, KV_PROTO_VERSIONED, pzErr);
  for(i=0; rc==SQLITE_OK && i<nRead; i=j){    /* per run of one table */
    for(j=i+1; j<nRead && aRead[j].nTab==aRead[i].nTab
               && memcmp(aRead[j].zTab, aRead[i].zTab, aRead[i].nTab)==0; j++){}
    rc = kvNoteReads(p, aRead[i].zTab, aRead[i].nTab, &aRead[i].aKey,
                     &aRead[i].nKey, sizeof(KvVerRead), j-i, pzErr);
  }
  chk.aRead = aRead;
  chk.nRead = nRead;
  if( rc==SQLITE_OK ) rc = kvRootPrepareEx(p, vtxCheck, &chk, pzErr);
  return rc;
}

/* ------------------------------------------------------------ commit --- */

/* The final writes of the root: (table, write set) pairs, referenced. */
typedef struct KvWriteList KvWriteList;
struct KvWriteList {
  int n;
  KvTable **apTab;
  KvMap **apWrite;
};

void kv_version_receipts_free(KvVerReceipts *p){
  int i;
  if( p==0 ) return;
  for(i=0; i<p->nMap; i++) kv_map_unref(p->apMap[i]);
  sqlite3_free(p->apMap);
  sqlite3_free(p->a);
  kv_buf_free(&p->data);
  sqlite3_free(p);
}

/* Offsets -> pointers (recording is over). */
static void vtxReceiptsFix(KvVerReceipts *p){
  int i;
  for(i=0; i<p->n; i++){
    p->a[i].zTab = (const char*)p->data.a + (intptr_t)p->a[i].zTab;
  }
  p->pLastTab = 0;
}

static void vtxWriteListFree(KvWriteList *w){
  int i;
  for(i=0; i<w->n; i++) kv_map_unref(w->apWrite[i]);
  sqlite3_free(w->apTab);
  sqlite3_free(w->apWrite);
}

static int vtxWriteListGet(KvRoot *p, KvWriteList *w){
  int i;
  memset(w, 0, sizeof(*w));
  w->apTab = sqlite3_malloc64((p->nChild+1)*sizeof(KvTable*));
  w->apWrite = sqlite3_malloc64((p->nChild+1)*sizeof(KvMap*));
  if( w->apTab==0 || w->apWrite==0 ){ vtxWriteListFree(w); return SQLITE_NOMEM; }
  for(i=0; i<p->nChild; i++){
    KvChild *c = p->apChild[i];
    if( c->bSchema || kv_map_count(c->pWrite)==0 ) continue;
    w->apTab[w->n] = c->pTab;
    w->apWrite[w->n++] = kv_map_ref(c->pWrite);
  }
  return SQLITE_OK;
}

/* Does receipt r match write e of table t, aVer being the root's upsert
** version (the kind byte decides delete)? */
static int vtxReceiptMatches(const uint8_t *aVer, const KvVerReceipt *r,
                            KvTable *t, const KvMapEntry *e){
  return r->nTab==t->nName && memcmp(r->zTab, t->zName, t->nName)==0
      && r->nKey==e->nKey && memcmp(r->aKey, e->aKey, e->nKey)==0
      && r->aVer[0]==(e->bTomb ? 'd' : 'u')
      && memcmp(r->aVer+1, aVer+1, KV_VERSION_BYTES-1)==0;
}

/* Walk the final writes and the receipts together; 0 if they differ. */
static int vtxReceiptsExact(KvRoot *p, KvWriteList *w, KvVerReceipts *pR,
                           int *piBad){
  uint8_t aVer[KV_VERSION_BYTES];
  int i, j = 0, bOk = 1;
  kvVersionOfRoot(p, aVer);
  for(i=0; bOk && i<w->n; i++){
    KvMapCursor *pCsr = kv_map_cursor_new(w->apWrite[i]);
    KvMapEntry e;
    int bOn;
    if( pCsr==0 ) return 0;
    for(bOn=kv_map_cursor_seek(pCsr, KV_SEEK_FIRST, 0, 0); bOn && bOk;
        bOn=kv_map_cursor_next(pCsr)){
      kv_map_cursor_entry(pCsr, &e);
      bOk = j<pR->n && vtxReceiptMatches(aVer, &pR->a[j], w->apTab[i], &e);
      if( bOk ) j++;
    }
    kv_map_cursor_free(pCsr);
  }
  *piBad = j;
  return bOk && j==pR->n;
}

int kv_version_commit(KvRoot *p, KvVerReceipts **ppOut, char **pzErr){
  KvVerReceipts *pR;
  KvWriteList w;
  int64_t nWrite = 0;
  int i, rc, iBad = 0;
  *ppOut = 0;
  if( p->eState==KV_ROOT_FAILED || p->eState==KV_ROOT_DONE ){
    return kv_root_commit(p, pzErr);        /* the "finished" error */
  }
  if( p->eState!=KV_ROOT_PREPARED || p->eProto!=KV_PROTO_VERSIONED ){
    *pzErr = sqlite3_mprintf("kv: %s %llu is not prepared with "
        "kv_prepare_with_version", kv_root_who(p), kv_root_who_id(p));
    return SQLITE_MISUSE;
  }
  pR = sqlite3_malloc64(sizeof(*pR));
  if( pR==0 ) return SQLITE_NOMEM;
  memset(pR, 0, sizeof(*pR));
  if( (rc = vtxWriteListGet(p, &w))!=SQLITE_OK ){ sqlite3_free(pR); return rc; }
  for(i=0; i<w.n; i++) nWrite += kv_map_count(w.apWrite[i]);
  if( nWrite>0 && nWrite<INT_MAX/2 ){      /* else the recording grows it */
    pR->a = sqlite3_malloc64(nWrite*sizeof(KvVerReceipt));
    if( pR->a ) pR->nAlloc = (int)nWrite;
  }
  p->pReceipts = pR;
  rc = kv_root_commit(p, pzErr);
  p->pReceipts = 0;
  vtxReceiptsFix(pR);
  if( rc==SQLITE_OK && (pR->rc!=SQLITE_OK || !vtxReceiptsExact(p, &w, pR, &iBad)) ){
    *pzErr = sqlite3_mprintf("kv: internal error: the receipts of committed "
        "transaction %llu do not match its writes (%d receipts, first "
        "difference at %d%s); the commit stands", (unsigned long long)p->tid,
        pR->n, iBad, pR->rc!=SQLITE_OK ? ", out of memory while recording" : "");
    rc = SQLITE_INTERNAL;
  }
  /* The receipts' keys point into the write sets: they keep them. */
  pR->nMap = w.n;
  pR->apMap = w.apWrite;
  w.n = 0;
  w.apWrite = 0;
  vtxWriteListFree(&w);
  if( rc==SQLITE_OK ) *ppOut = pR; else kv_version_receipts_free(pR);
  return rc;
}
