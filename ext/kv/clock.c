/*
** clock.c -- the clock of deadlines: TTL, queue leases and delays.
**
** kv_clock_ms() is the wall clock in unix milliseconds, unless a test set
** it otherwise with kv_clock_set(): KV_CLOCK_OFFSET adds a signed offset
** to the wall clock, KV_CLOCK_FIXED stops it at a value until the next
** call, KV_CLOCK_WALL restores it.  The setting is process-wide and read
** with relaxed atomics: a thread that reads the clock while another sets
** it sees the old or the new setting, whole.  Nothing else in the KV
** engine uses this clock: WAL flush intervals, busy waits and decision-log
** ages run on the real clocks.
*/
#include "config.h"
#include "ext/kv/kv.h"

#include <stdint.h>
#include <time.h>

/* The setting: a mode and its value, published under a sequence count. */
static int64_t clockValue = 0;   /* offset or fixed time, ms */
static int clockMode = KV_CLOCK_WALL;
static int64_t clockGen = 0;     /* bumped around every change (seqlock) */

static int64_t clockWallMs(void){
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec*1000 + ts.tv_nsec/1000000;
}

int64_t kv_clock_ms(void){
  int64_t g0, g1, v;
  int m;
  do{
    g0 = __atomic_load_n(&clockGen, __ATOMIC_ACQUIRE);
    m = __atomic_load_n(&clockMode, __ATOMIC_RELAXED);
    v = __atomic_load_n(&clockValue, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    g1 = __atomic_load_n(&clockGen, __ATOMIC_RELAXED);
  }while( (g0 & 1) || g0!=g1 );
  if( m==KV_CLOCK_FIXED ) return v;
  if( m==KV_CLOCK_OFFSET ) return clockWallMs() + v;
  return clockWallMs();
}

int kv_clock_set(int eMode, int64_t iMs){
  static int lock = 0;
  if( eMode!=KV_CLOCK_WALL && eMode!=KV_CLOCK_OFFSET
   && eMode!=KV_CLOCK_FIXED ){
    return SQLITE_MISUSE;
  }
  while( __atomic_exchange_n(&lock, 1, __ATOMIC_ACQUIRE) ){}
  __atomic_add_fetch(&clockGen, 1, __ATOMIC_RELEASE);
  __atomic_store_n(&clockMode, eMode, __ATOMIC_RELAXED);
  __atomic_store_n(&clockValue, eMode==KV_CLOCK_WALL ? 0 : iMs,
                   __ATOMIC_RELAXED);
  __atomic_add_fetch(&clockGen, 1, __ATOMIC_RELEASE);
  __atomic_store_n(&lock, 0, __ATOMIC_RELEASE);
  return SQLITE_OK;
}

int kv_clock_mode(void){
  return __atomic_load_n(&clockMode, __ATOMIC_RELAXED);
}
