/*
** kv_readset.c -- the JSON read set of kv_prepare_with_version, parsed in
** one pass without SQLite's JSON functions (a versioned prepare of 256 keys
** must cost little more than an ordinary one):
**
**   [{"table":"t","key":<string|number|{"hex":".."}>,"version":"u:.."}, ...]
**
** Each element must have exactly those three members.  Strings may use
** every JSON escape; numbers without '.', 'e' or 'E' that fit in 64 bits
** are integer keys, others real keys (equal numbers are the same key, as in
** SQLite).  The result is sorted by (table, key) and holds no pair twice.
** The same parser reads the key list of kv_query_with_versions
** (kv_keylist_parse).  Declared in ext/kv/version.h; called by kv_vfunc.c;
** calls nothing else of ext/.
*/
#include "config.h"
#include "ext/kv/kv.h"
#include "ext/kv_sql.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <errno.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

typedef struct ReadsetJson ReadsetJson;
struct ReadsetJson {
  const char *z;
  int n, i;
  int iElem;
  int bKeys;               /* parsing a key list, not a read set */
  int bInt;                /* the last key was an integer of <= 18 digits */
  int64_t iInt;            /* ... and its value */
  char **pzErr;
};

static void readsetJsonWs(ReadsetJson *p){
  while( p->i<p->n && (p->z[p->i]==' ' || p->z[p->i]=='\t'
      || p->z[p->i]=='\n' || p->z[p->i]=='\r') ) p->i++;
}

/* Consume character c (after white space); 1 if it was there. */
static int readsetJsonEat(ReadsetJson *p, char c){
  readsetJsonWs(p);
  if( p->i<p->n && p->z[p->i]==c ){ p->i++; return 1; }
  return 0;
}

static int readsetJsonErr(ReadsetJson *p, const char *zWhat){
  if( *p->pzErr==0 && p->bKeys ){
    *p->pzErr = p->iElem<0
      ? sqlite3_mprintf("kv: the key list must be a JSON array text such as "
          "'[\"a\",7,{\"hex\":\"00ff\"}]' (%s)", zWhat)
      : sqlite3_mprintf("kv: key list element %d: %s", p->iElem, zWhat);
  }
  if( *p->pzErr==0 ){
    *p->pzErr = p->iElem<0
      ? sqlite3_mprintf("kv: the read set must be a JSON array text such as "
          "'[{\"table\":\"t\",\"key\":\"k\",\"version\":\"u:..\"}]' (%s)",
          zWhat)
      : sqlite3_mprintf("kv: read set element %d: %s", p->iElem, zWhat);
  }
  return SQLITE_ERROR;
}

static int readsetHex4(const char *z){
  int i, v = 0;
  for(i=0; i<4; i++){
    char c = z[i];
    int d = (c>='0'&&c<='9') ? c-'0' : (c>='a'&&c<='f') ? c-'a'+10
          : (c>='A'&&c<='F') ? c-'A'+10 : -1;
    if( d<0 ) return -1;
    v = v*16 + d;
  }
  return v;
}

static int readsetUtf8Put(KvBuf *pOut, unsigned int c){
  uint8_t a[4];
  int n;
  if( c<0x80 ){ a[0] = (uint8_t)c; n = 1; }
  else if( c<0x800 ){ a[0] = 0xc0|(c>>6); a[1] = 0x80|(c&0x3f); n = 2; }
  else if( c<0x10000 ){
    a[0] = 0xe0|(c>>12); a[1] = 0x80|((c>>6)&0x3f); a[2] = 0x80|(c&0x3f); n = 3;
  }else{
    a[0] = 0xf0|(c>>18); a[1] = 0x80|((c>>12)&0x3f);
    a[2] = 0x80|((c>>6)&0x3f); a[3] = 0x80|(c&0x3f); n = 4;
  }
  return kv_buf_append(pOut, a, n);
}

/* A \u escape at z (after the backslash-u); code point in *pc, length of
** input used in *pn (4 or 10 for a surrogate pair), -1 if malformed. */
static int readsetJsonU(const char *z, int nLeft, unsigned int *pc){
  int hi = nLeft>=4 ? readsetHex4(z) : -1, lo;
  if( hi<0 || (hi>=0xdc00 && hi<0xe000) ) return -1;
  if( hi<0xd800 || hi>=0xdc00 ){ *pc = (unsigned)hi; return 4; }
  if( nLeft<10 || z[4]!='\\' || z[5]!='u' ) return -1;
  lo = readsetHex4(z+6);
  if( lo<0xdc00 || lo>=0xe000 ) return -1;
  *pc = 0x10000 + ((unsigned)(hi-0xd800)<<10) + (unsigned)(lo-0xdc00);
  return 10;
}

/* A JSON string (the opening quote is next) into *pOut, unescaped. */
static int readsetJsonString(ReadsetJson *p, KvBuf *pOut){
  static const char zFrom[] = "\"\\/bfnrt", zTo[] = "\"\\/\b\f\n\r\t";
  int rc = SQLITE_OK;
  kv_buf_reset(pOut);
  if( !readsetJsonEat(p, '"') ) return readsetJsonErr(p, "expected a string");
  while( rc==SQLITE_OK && p->i<p->n && p->z[p->i]!='"' ){
    const char *zEsc;
    unsigned char c;
    int j = p->i;
    while( j<p->n && p->z[j]!='"' && p->z[j]!='\\'
        && (unsigned char)p->z[j]>=0x20 ) j++;
    if( j>p->i ){                /* a run of plain characters at once */
      rc = kv_buf_append(pOut, p->z+p->i, j-p->i);
      p->i = j;
      continue;
    }
    c = (unsigned char)p->z[p->i++];
    if( c<0x20 ) return readsetJsonErr(p, "control character in a string");
    if( p->i>=p->n ) break;
    if( p->z[p->i]=='u' ){
      unsigned int cp;
      int nUsed = readsetJsonU(p->z+p->i+1, p->n-p->i-1, &cp);
      if( nUsed<0 ) return readsetJsonErr(p, "bad \\u escape in a string");
      p->i += 1+nUsed;
      rc = readsetUtf8Put(pOut, cp);
    }else if( (zEsc = strchr(zFrom, p->z[p->i]))!=0 && *zEsc ){
      rc = kv_buf_append(pOut, &zTo[zEsc-zFrom], 1);
      p->i++;
    }else{
      return readsetJsonErr(p, "bad escape in a string");
    }
  }
  if( rc==SQLITE_OK && !readsetJsonEat(p, '"') ){
    return readsetJsonErr(p, "unterminated string");
  }
  return rc;
}

/* The number zNum (NUL-terminated, bReal if it has '.', 'e' or 'E') into
** a key encoding: an integer key if it fits in 64 bits, else a real. */
static int readsetNumberKey(ReadsetJson *p, const char *zNum, int bReal,
                            KvBuf *pKey){
  char *zEnd = 0;
  double r;
  if( !bReal ){
    long long v;
    errno = 0;
    v = strtoll(zNum, &zEnd, 10);
    if( errno==0 && *zEnd==0 ){
      return kv_key_encode_c(SQLITE_INTEGER, v, 0, 0, 0, pKey, p->pzErr);
    }
  }
  r = strtod(zNum, &zEnd);
  if( *zEnd ) return readsetJsonErr(p, "bad number");
  return kv_key_encode_c(SQLITE_FLOAT, 0, r, 0, 0, pKey, p->pzErr);
}

/* Can character c be part of a number token? */
static int readsetJsonNumChar(char c){
  return (c>='0' && c<='9') || c=='-' || c=='+' || c=='.' || c=='e'
      || c=='E';
}

/* If the number token at z (n bytes left) is an optional '-' and 1 to 18
** decimal digits, set *pv to its value and return the token's length;
** else 0. */
static int readsetJsonScanSmallInt(const char *z, int n, int64_t *pv){
  int j = 0, k = n>0 && z[0]=='-';
  int64_t v = 0;
  for(j=k; j<n && j-k<18 && z[j]>='0' && z[j]<='9'; j++) v = v*10 + (z[j]-'0');
  /* a 19th digit (or '.', 'e', ...) next: not a small integer */
  if( j==k || (j<n && readsetJsonNumChar(z[j])) ) return 0;
  *pv = k ? -v : v;
  return j;
}

/* A JSON number (of any length) into a key encoding. */
static int readsetJsonNumber(ReadsetJson *p, KvBuf *pKey){
  char zStack[64], *zNum = zStack;
  int i0, n, bReal = 0, rc;
  int64_t v;
  readsetJsonWs(p);
  if( (n = readsetJsonScanSmallInt(p->z+p->i, p->n-p->i, &v))>0 ){
    p->i += n;                                       /* the common case */
    p->bInt = 1;
    p->iInt = v;
    return kv_key_append_int(pKey, v);
  }
  i0 = p->i;
  while( p->i<p->n && readsetJsonNumChar(p->z[p->i]) ){
    char c = p->z[p->i++];
    if( c=='.' || c=='e' || c=='E' ) bReal = 1;
  }
  n = p->i - i0;
  if( n==0 ) return readsetJsonErr(p, "bad number");
  if( n>=(int)sizeof(zStack) && (zNum = sqlite3_malloc64(n+1))==0 ){
    return SQLITE_NOMEM;
  }
  memcpy(zNum, p->z+i0, n);
  zNum[n] = 0;
  rc = readsetNumberKey(p, zNum, bReal, pKey);
  if( zNum!=zStack ) sqlite3_free(zNum);
  return rc;
}

static int readsetHexBlob(ReadsetJson *p, const KvBuf *pHex, KvBuf *pKey){
  KvBuf raw = {0, 0, 0};
  int i, rc = SQLITE_OK;
  if( pHex->n%2 ) return readsetJsonErr(p, "\"hex\" must be text of an even "
                                        "number of hex digits");
  for(i=0; rc==SQLITE_OK && i<pHex->n; i+=2){
    char a[5] = { '0', '0', (char)pHex->a[i], (char)pHex->a[i+1], 0 };
    int v = readsetHex4(a);
    uint8_t b = (uint8_t)v;
    if( v<0 ){
      rc = readsetJsonErr(p, "\"hex\" must be text of an even number of "
                          "hex digits");
    }else{
      rc = kv_buf_append(&raw, &b, 1);
    }
  }
  if( rc==SQLITE_OK ){
    rc = kv_key_encode_c(SQLITE_BLOB, 0, 0, raw.a ? raw.a : (uint8_t*)"",
                         raw.n, pKey, p->pzErr);
  }
  kv_buf_free(&raw);
  return rc;
}

/* The "key" member's value into a key encoding. */
static int readsetJsonKey(ReadsetJson *p, KvBuf *pKey, KvBuf *pTmp){
  char c;
  int rc;
  p->bInt = 0;
  readsetJsonWs(p);
  c = p->i<p->n ? p->z[p->i] : 0;
  if( c=='"' ){
    rc = readsetJsonString(p, pTmp);
    if( rc==SQLITE_OK ){
      rc = kv_key_encode_c(SQLITE_TEXT, 0, 0, pTmp->a ? pTmp->a : (uint8_t*)"",
                           pTmp->n, pKey, p->pzErr);
    }
    return rc;
  }
  if( c=='-' || (c>='0' && c<='9') ) return readsetJsonNumber(p, pKey);
  if( c=='{' ){
    p->i++;
    rc = readsetJsonString(p, pTmp);
    if( rc==SQLITE_OK && (pTmp->n!=3 || memcmp(pTmp->a, "hex", 3)!=0) ){
      rc = SQLITE_ERROR;
    }
    if( rc==SQLITE_OK && !readsetJsonEat(p, ':') ) rc = SQLITE_ERROR;
    readsetJsonWs(p);
    if( rc==SQLITE_OK && (p->i>=p->n || p->z[p->i]!='"') ) rc = SQLITE_ERROR;
    if( rc==SQLITE_OK ) rc = readsetJsonString(p, pTmp);
    if( rc==SQLITE_OK && !readsetJsonEat(p, '}') ) rc = SQLITE_ERROR;
    if( rc!=SQLITE_OK ){
      sqlite3_free(*p->pzErr);
      *p->pzErr = 0;
      return readsetJsonErr(p, "a blob key must be {\"hex\":\"..\"}");
    }
    return readsetHexBlob(p, pTmp, pKey);
  }
  return readsetJsonErr(p, p->bKeys ? "a key must be a JSON string, number or "
                        "{\"hex\":\"..\"}" : "\"key\" must be a JSON string, "
                        "number or {\"hex\":\"..\"}");
}

/* ------------------------------------------------------------ elements --- */

/* While parsing, elements point into the arena by offset (it moves as it
** grows); readsetFix turns the offsets into pointers at the end. */
typedef struct ReadsetElem ReadsetElem;
struct ReadsetElem {
  KvBuf tab, key, tmp;
  KvBuf data;              /* the arena: table NUL key, per element */
  uint8_t aVer[KV_VERSION_BYTES];
  int mSeen;               /* 1 table, 2 key, 4 version */
  const char *zRawTab;     /* the previous element's table as raw JSON */
  int nRawTab;
  int iPrevTab;            /* its arena offset, -1 if none */
  int nPrevTab;            /* its length in bytes */
  int bTabReused;          /* this element's table is that one */
};

/* If the plain JSON string "zLit" (no escapes) is next, consume it. */
static int readsetJsonLit(ReadsetJson *p, const char *zLit, int nLit){
  readsetJsonWs(p);
  if( p->i+nLit+2<=p->n && p->z[p->i]=='"' && p->z[p->i+nLit+1]=='"'
   && memcmp(p->z+p->i+1, zLit, nLit)==0 ){
    p->i += nLit+2;
    return 1;
  }
  return 0;
}

/* The member name: 0 table, 1 key, 2 version, 3 other (or an error). */
static int readsetJsonMemberName(ReadsetJson *p, ReadsetElem *e, int *pk){
  static const char *azName[] = { "table", "key", "version" };
  static const int anName[] = { 5, 3, 7 };
  int k, rc;
  for(k=0; k<3; k++){
    if( readsetJsonLit(p, azName[k], anName[k]) ){ *pk = k; return 0; }
  }
  rc = readsetJsonString(p, &e->tmp);           /* escaped, or unknown */
  for(k=0; rc==SQLITE_OK && k<3; k++){
    if( e->tmp.n==anName[k] && memcmp(e->tmp.a, azName[k], e->tmp.n)==0 ) break;
  }
  *pk = k;
  return rc;
}

/* The "table" value: reuse the previous element's (its name, already
** checked and stored in the arena) when the raw JSON text is the same (a
** read set is usually many keys of few tables). */
static int readsetJsonTable(ReadsetJson *p, ReadsetElem *e){
  int i0, rc;
  readsetJsonWs(p);
  i0 = p->i;
  e->bTabReused = 0;
  if( e->iPrevTab>=0 && p->i+e->nRawTab<=p->n
   && memcmp(p->z+p->i, e->zRawTab, e->nRawTab)==0 ){
    p->i += e->nRawTab;
    e->bTabReused = 1;
    return SQLITE_OK;
  }
  rc = readsetJsonString(p, &e->tab);
  if( rc==SQLITE_OK ){
    rc = kv_name_check(e->tab.a ? (const char*)e->tab.a : "", e->tab.n,
                       p->pzErr);
  }
  if( rc==SQLITE_OK ){
    e->zRawTab = p->z+i0;
    e->nRawTab = p->i-i0;
    e->iPrevTab = -2;                    /* set once stored */
  }
  return rc;
}

/* The "version" value, parsed in place when it has no escapes. */
static int readsetJsonVersion(ReadsetJson *p, ReadsetElem *e){
  int rc;
  readsetJsonWs(p);
  if( p->i+KV_VERSION_TEXT+2<=p->n && p->z[p->i+KV_VERSION_TEXT+1]=='"'
   && kv_version_parse(p->z+p->i+1, KV_VERSION_TEXT, e->aVer)==SQLITE_OK ){
    p->i += KV_VERSION_TEXT+2;
    return SQLITE_OK;
  }
  rc = readsetJsonString(p, &e->tmp);
  if( rc==SQLITE_OK && kv_version_parse((const char*)e->tmp.a, e->tmp.n,
                                        e->aVer)!=SQLITE_OK ){
    rc = readsetJsonErr(p, "\"version\" must be \"u:<32 hex>\" or "
                        "\"d:<32 hex>\" as kv_query_with_version returns it");
  }
  return rc;
}

static int readsetJsonMember(ReadsetJson *p, ReadsetElem *e){
  int k, rc = readsetJsonMemberName(p, e, &k);
  if( rc!=SQLITE_OK ) return rc;
  if( k==3 || (e->mSeen & (1<<k)) || !readsetJsonEat(p, ':') ){
    return readsetJsonErr(p, "must be an object with exactly \"table\", "
                          "\"key\" and \"version\"");
  }
  e->mSeen |= 1<<k;
  readsetJsonWs(p);
  if( k!=1 && (p->i>=p->n || p->z[p->i]!='"') ){
    return readsetJsonErr(p, k==0 ? "\"table\" must be a string"
                          : "\"version\" must be a string");
  }
  if( k==0 ) return readsetJsonTable(p, e);
  if( k==1 ){
    kv_buf_reset(&e->key);
    return readsetJsonKey(p, &e->key, &e->tmp);
  }
  return readsetJsonVersion(p, e);
}

/* The common form of an element, as clients write it after the first:
** {"table":<the previous element's table, the same raw text>,"key":<an
** integer of up to 18 digits>,"version":"<34 chars>"} with no white
** space.  Returns 1 if the element has that form (*pRc: the outcome of
** storing it in r and the arena), 0 to parse it the general way (p->i
** unchanged; every error is reported there). */
static int readsetJsonElemFast(ReadsetJson *p, ReadsetElem *e, KvVerRead *r,
                               int *pRc){
  const char *z = p->z + p->i;
  int n = p->n - p->i, j, k, iKey;
  int64_t v;
  if( e->iPrevTab<0 || n<9+e->nRawTab+7 || memcmp(z, "{\"table\":", 9)!=0
   || memcmp(z+9, e->zRawTab, e->nRawTab)!=0
   || memcmp(z+9+e->nRawTab, ",\"key\":", 7)!=0 ){
    return 0;
  }
  k = 9 + e->nRawTab + 7;
  if( (j = readsetJsonScanSmallInt(z+k, n-k, &v))==0 ) return 0;
  j += k;
  if( n-j<12+KV_VERSION_TEXT+2 || memcmp(z+j, ",\"version\":\"", 12)!=0
   || z[j+12+KV_VERSION_TEXT]!='"' || z[j+13+KV_VERSION_TEXT]!='}'
   || kv_version_parse(z+j+12, KV_VERSION_TEXT, r->aVer)!=SQLITE_OK ){
    return 0;
  }
  iKey = e->data.n;
  *pRc = kv_key_append_int(&e->data, v);
  if( *pRc==SQLITE_OK ){
    r->zTab = (const char*)(intptr_t)e->iPrevTab; r->nTab = e->nPrevTab;
    r->aKey = (const uint8_t*)(intptr_t)iKey; r->nKey = e->data.n - iKey;
    p->i += j + 14 + KV_VERSION_TEXT;
  }
  return 1;
}

/* One element into pSet->a[pSet->n] (offsets into e->data for now). */
static int readsetJsonElem(ReadsetJson *p, ReadsetElem *e, KvReadSet *pSet){
  KvVerRead *r = &pSet->a[pSet->n];
  int rc = SQLITE_OK, iOff, iKey, nTab;
  readsetJsonWs(p);
  if( readsetJsonElemFast(p, e, r, &rc) ){
    if( rc==SQLITE_OK ) pSet->n++;
    return rc;
  }
  e->mSeen = 0;
  if( !readsetJsonEat(p, '{') ){
    return readsetJsonErr(p, "must be an object with exactly \"table\", "
                          "\"key\" and \"version\"");
  }
  do{
    rc = readsetJsonMember(p, e);
  }while( rc==SQLITE_OK && readsetJsonEat(p, ',') );
  if( rc==SQLITE_OK && (!readsetJsonEat(p, '}') || e->mSeen!=7) ){
    rc = readsetJsonErr(p, "must be an object with exactly \"table\", "
                        "\"key\" and \"version\"");
  }
  if( rc!=SQLITE_OK ) return rc;
  if( e->bTabReused ){                   /* share the stored name */
    iOff = e->iPrevTab;
    nTab = e->nPrevTab;
  }else{
    iOff = e->data.n;
    nTab = e->tab.n;
    rc = kv_buf_append(&e->data, e->tab.a ? e->tab.a : (uint8_t*)"", nTab);
    if( rc==SQLITE_OK ) rc = kv_buf_append(&e->data, "", 1);
    if( rc==SQLITE_OK && e->iPrevTab==-2 ){
      e->iPrevTab = iOff;
      e->nPrevTab = nTab;
    }
  }
  iKey = e->data.n;
  if( rc==SQLITE_OK ) rc = kv_buf_append(&e->data, e->key.a, e->key.n);
  if( rc!=SQLITE_OK ) return rc;
  r->zTab = (const char*)(intptr_t)iOff; r->nTab = nTab;
  r->aKey = (const uint8_t*)(intptr_t)iKey;
  r->nKey = e->key.n;
  memcpy(r->aVer, e->aVer, KV_VERSION_BYTES);
  pSet->n++;
  return SQLITE_OK;
}

/* Offsets -> pointers into the arena, which the set takes over. */
static void readsetFix(KvReadSet *pSet, ReadsetElem *e){
  int i;
  pSet->aData = e->data.a;
  e->data.a = 0;
  for(i=0; i<pSet->n; i++){
    KvVerRead *r = &pSet->a[i];
    r->zTab = (const char*)pSet->aData + (intptr_t)r->zTab;
    r->aKey = pSet->aData + (intptr_t)r->aKey;
  }
}

static int readsetGrow(KvReadSet *pSet, int *pnAlloc){
  if( pSet->n==*pnAlloc ){
    int nNew = *pnAlloc ? *pnAlloc*2 : 16;
    KvVerRead *a = sqlite3_realloc64(pSet->a, nNew*sizeof(KvVerRead));
    if( a==0 ) return SQLITE_NOMEM;
    pSet->a = a;
    *pnAlloc = nNew;
  }
  return SQLITE_OK;
}

static int readsetCmp(const void *pA, const void *pB){
  const KvVerRead *a = pA, *b = pB;
  int c = 0;
  if( a->zTab!=b->zTab || a->nTab!=b->nTab ){    /* else: one stored name */
    c = memcmp(a->zTab, b->zTab, a->nTab<b->nTab ? a->nTab : b->nTab);
    if( c==0 ) c = a->nTab - b->nTab;
  }
  if( c==0 ) c = memcmp(a->aKey, b->aKey, a->nKey<b->nKey ? a->nKey : b->nKey);
  return c ? c : a->nKey - b->nKey;
}

/* Sort the set (unless it already is) and reject a (table, key) named
** twice. */
static int readsetUnique(KvReadSet *p, char **pzErr){
  int i;
  for(i=1; i<p->n && readsetCmp(&p->a[i-1], &p->a[i])<0; i++){}
  if( i>=p->n ) return SQLITE_OK;        /* strictly ascending: no twins */
  qsort(p->a, p->n, sizeof(KvVerRead), readsetCmp);
  for(i=1; i<p->n; i++){
    if( readsetCmp(&p->a[i-1], &p->a[i])==0 ){
      char *zKey = kv_key_describe(p->a[i].aKey, p->a[i].nKey);
      *pzErr = sqlite3_mprintf("kv: the read set names table %s key %s "
                               "twice", p->a[i].zTab, zKey ? zKey : "?");
      sqlite3_free(zKey);
      return SQLITE_ERROR;
    }
  }
  return SQLITE_OK;
}

void kv_readset_free(KvReadSet *p){
  sqlite3_free(p->a);
  sqlite3_free(p->aData);
  memset(p, 0, sizeof(*p));
}

int kv_readset_parse(const char *z, int n, KvReadSet *pSet, char **pzErr){
  ReadsetJson j;
  ReadsetElem e;
  int nAlloc = 0, rc = SQLITE_OK;
  memset(pSet, 0, sizeof(*pSet));
  memset(&e, 0, sizeof(e));
  e.iPrevTab = -1;
  j.z = z; j.n = z ? n : 0; j.i = 0; j.iElem = -1; j.pzErr = pzErr;
  j.bKeys = 0;
  j.bInt = 0;
  j.iInt = 0;
  if( z==0 || !readsetJsonEat(&j, '[') ) return readsetJsonErr(&j, "no array");
  if( !readsetJsonEat(&j, ']') ){
    do{
      j.iElem = pSet->n;
      rc = readsetGrow(pSet, &nAlloc);
      if( rc==SQLITE_OK ) rc = readsetJsonElem(&j, &e, pSet);
    }while( rc==SQLITE_OK && readsetJsonEat(&j, ',') );
    j.iElem = -1;
    if( rc==SQLITE_OK && !readsetJsonEat(&j, ']') ){
      rc = readsetJsonErr(&j, "bad array");
    }
  }
  readsetJsonWs(&j);
  if( rc==SQLITE_OK && j.i<j.n ){
    rc = readsetJsonErr(&j, "text after the array");
  }
  readsetFix(pSet, &e);
  kv_buf_free(&e.tab); kv_buf_free(&e.key); kv_buf_free(&e.tmp);
  kv_buf_free(&e.data);
  if( rc==SQLITE_OK ) rc = readsetUnique(pSet, pzErr);
  if( rc!=SQLITE_OK ) kv_readset_free(pSet);
  return rc;
}

/* ----------------------------------------------------------- key lists --- */

void kv_keylist_free(KvKeyList *p){
  sqlite3_free(p->aOff);
  sqlite3_free(p->aInt);
  sqlite3_free(p->abInt);
  kv_buf_free(&p->buf);
  memset(p, 0, sizeof(*p));
}

/* Append one key (the next JSON value) to p. */
static int readsetKeyListElem(ReadsetJson *j, KvKeyList *p, int *pnAlloc,
                              KvBuf *pTmp){
  int rc;
  if( p->n+1>=*pnAlloc ){
    int nNew = *pnAlloc ? *pnAlloc*2 : 64;
    int *a = sqlite3_realloc64(p->aOff, nNew*sizeof(int));
    int64_t *aInt;
    uint8_t *abInt;
    if( a==0 ) return SQLITE_NOMEM;
    p->aOff = a;
    if( (aInt = sqlite3_realloc64(p->aInt, nNew*sizeof(int64_t)))==0 ){
      return SQLITE_NOMEM;
    }
    p->aInt = aInt;
    if( (abInt = sqlite3_realloc64(p->abInt, nNew))==0 ) return SQLITE_NOMEM;
    p->abInt = abInt;
    *pnAlloc = nNew;
  }
  rc = readsetJsonKey(j, &p->buf, pTmp);        /* appends the key's encoding */
  if( rc==SQLITE_OK ){
    p->aInt[p->n] = j->iInt;
    p->abInt[p->n] = (uint8_t)j->bInt;
    p->aOff[++p->n] = p->buf.n;
  }
  return rc;
}

int kv_keylist_parse(const char *z, int n, KvKeyList *p, char **pzErr){
  KvBuf tmp = {0, 0, 0};
  ReadsetJson j;
  int nAlloc = 0, rc = SQLITE_OK;
  memset(p, 0, sizeof(*p));
  j.z = z; j.n = z ? n : 0; j.i = 0; j.iElem = -1; j.pzErr = pzErr;
  j.bKeys = 1;
  j.bInt = 0;
  j.iInt = 0;
  if( z==0 || !readsetJsonEat(&j, '[') ) return readsetJsonErr(&j, "no array");
  p->aOff = sqlite3_malloc64(64*sizeof(int));
  p->aInt = sqlite3_malloc64(64*sizeof(int64_t));
  p->abInt = sqlite3_malloc64(64);
  if( p->aOff==0 || p->aInt==0 || p->abInt==0 ){
    kv_keylist_free(p);
    return SQLITE_NOMEM;
  }
  nAlloc = 64;
  p->aOff[0] = 0;
  if( !readsetJsonEat(&j, ']') ){
    do{
      j.iElem = p->n;
      rc = readsetKeyListElem(&j, p, &nAlloc, &tmp);
    }while( rc==SQLITE_OK && readsetJsonEat(&j, ',') );
    j.iElem = -1;
    if( rc==SQLITE_OK && !readsetJsonEat(&j, ']') ){
      rc = readsetJsonErr(&j, "bad array");
    }
  }
  readsetJsonWs(&j);
  if( rc==SQLITE_OK && j.i<j.n ){
    rc = readsetJsonErr(&j, "text after the array");
  }
  kv_buf_free(&tmp);
  if( rc!=SQLITE_OK ) kv_keylist_free(p);
  return rc;
}
