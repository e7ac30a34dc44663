/*
** bytes.h -- the byte-order helpers of vfs/store/ and vfs/ (the lowest
** header both include): big-endian integers, as the store layout's keys
** and rows, LTX blobs and SQLite's database header hold them, and the
** little-endian 64-bit counters of store_add().  Inline, so using them
** ties no file to another.
*/
#ifndef DEPOT_BYTES_H
#define DEPOT_BYTES_H

#include <stdint.h>

static inline uint32_t bytes_get16(const unsigned char *a){
  return ((uint32_t)a[0]<<8) | (uint32_t)a[1];
}

static inline void bytes_put32(unsigned char *a, uint32_t v){
  a[0] = (unsigned char)(v>>24); a[1] = (unsigned char)(v>>16);
  a[2] = (unsigned char)(v>>8);  a[3] = (unsigned char)v;
}

static inline void bytes_put64(unsigned char *a, uint64_t v){
  bytes_put32(a, (uint32_t)(v>>32));
  bytes_put32(a+4, (uint32_t)v);
}

static inline uint32_t bytes_get32(const unsigned char *a){
  return ((uint32_t)a[0]<<24) | ((uint32_t)a[1]<<16)
       | ((uint32_t)a[2]<<8) | (uint32_t)a[3];
}

static inline uint64_t bytes_get64(const unsigned char *a){
  return ((uint64_t)bytes_get32(a)<<32) | bytes_get32(a+4);
}

/* Little-endian: the counters of store_add(). */
static inline uint64_t bytes_get64le(const unsigned char *a){
  return (uint64_t)a[0] | ((uint64_t)a[1]<<8) | ((uint64_t)a[2]<<16)
       | ((uint64_t)a[3]<<24) | ((uint64_t)a[4]<<32) | ((uint64_t)a[5]<<40)
       | ((uint64_t)a[6]<<48) | ((uint64_t)a[7]<<56);
}

static inline void bytes_put64le(unsigned char *a, uint64_t v){
  int i;
  for(i=0; i<8; i++) a[i] = (unsigned char)(v>>(8*i));
}

#endif /* DEPOT_BYTES_H */
