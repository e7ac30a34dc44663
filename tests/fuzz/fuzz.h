/*
** fuzz.h -- shared declarations of the fuzz targets in tests/fuzz/.
**
** Each fuzz_<target>.c defines LLVMFuzzerTestOneInput().  `make fuzz`
** links it with libFuzzer (clang -fsanitize=fuzzer,address,undefined);
** the Check-free smoke programs of `make check` link it with driver.c,
** which feeds it every file of tests/fuzz/corpus/<target>/ once.
**
** A target states properties with FUZZ_CHECK: a violated one prints the
** condition and aborts, which both engines report as a failure.
*/
#ifndef DEPOT_FUZZ_H
#define DEPOT_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *aData, size_t nData);

#define FUZZ_CHECK(x) do{ if( !(x) ){ \
  fprintf(stderr, "%s:%d: fuzz property failed: %s\n", \
          __FILE__, __LINE__, #x); \
  abort(); } }while(0)

#endif /* DEPOT_FUZZ_H */
