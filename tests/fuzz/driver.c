/*
** driver.c -- main() of the fuzz smoke programs that `make check` runs.
**
**   smoke_<target> [FILE|DIR...]
**
** Feeds every given file (every regular file of every given directory) to
** LLVMFuzzerTestOneInput() once, with no fuzzing engine, so the targets'
** seed corpora stay exercised by the ordinary gcc build.  With no argument
** it reads $srcdir/tests/fuzz/corpus/FUZZ_TARGET (automake exports srcdir
** to tests).  Exits 1 when nothing was fed (a missing corpus is a failure);
** a violated property aborts.
*/
#define _GNU_SOURCE 1          /* realpath */
#include "config.h"
#include "tests/fuzz/fuzz.h"

#include <dirent.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>

/* Feed the file zPath; 1 if it was fed, 0 if it is not a regular file. */
static int fuzzFeedFile(const char *zPath){
  FILE *f = fopen(zPath, "rb");
  uint8_t *a = 0;
  long n;
  int bFed = 0;
  if( f==0 ) return 0;
  if( fseek(f, 0, SEEK_END)==0 && (n = ftell(f))>=0 && fseek(f,0,SEEK_SET)==0 ){
    a = malloc(n>0 ? (size_t)n : 1);
    if( a && fread(a, 1, (size_t)n, f)==(size_t)n ){
      LLVMFuzzerTestOneInput(a, (size_t)n);
      bFed = 1;
    }
  }
  free(a);
  fclose(f);
  return bFed;
}

/* Feed zPath, or every regular file directly inside it; files fed.  The
** path is made absolute first: a target may change the working
** directory. */
static int fuzzFeed(const char *zArg){
  char zPath[PATH_MAX];
  struct stat st;
  DIR *d;
  struct dirent *e;
  int nFed = 0;
  if( realpath(zArg, zPath)==0 || stat(zPath, &st)!=0 ) return 0;
  if( !S_ISDIR(st.st_mode) ) return fuzzFeedFile(zPath);
  d = opendir(zPath);
  if( d==0 ) return 0;
  while( (e = readdir(d))!=0 ){
    char zFile[PATH_MAX+NAME_MAX+2];
    if( e->d_name[0]=='.' ) continue;
    snprintf(zFile, sizeof(zFile), "%s/%s", zPath, e->d_name);
    if( stat(zFile, &st)==0 && S_ISREG(st.st_mode) ) nFed += fuzzFeedFile(zFile);
  }
  closedir(d);
  return nFed;
}

int main(int argc, char **argv){
  int i, nFed = 0;
  if( argc>1 ){
    for(i=1; i<argc; i++) nFed += fuzzFeed(argv[i]);
  }else{
    char zDir[4096];
    const char *zSrc = getenv("srcdir");
    snprintf(zDir, sizeof(zDir), "%s/tests/fuzz/corpus/%s",
             zSrc ? zSrc : ".", FUZZ_TARGET);
    nFed = fuzzFeed(zDir);
  }
  printf("%s: %d inputs fed\n", FUZZ_TARGET, nFed);
  return nFed>0 ? 0 : 1;
}
