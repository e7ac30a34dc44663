/*
** harness.h -- shared helpers of the Check test programs.
**
** Each tests/check/check_<layer>.c defines depot_test_suite() and links
** tests/harness.c, which supplies main(): fork mode (each test in its own
** process, so a crash fails one test and not the program), a generous
** default timeout (sanitizer builds are slow), and the Check summary line on
** stdout, which .ci/run collects from the tests/ log files.
*/
#ifndef DEPOT_TEST_HARNESS_H
#define DEPOT_TEST_HARNESS_H

#include <check.h>
#include <sqlite3.h>
#include <sys/types.h>

/* Defined by each test program: the suite it runs. */
Suite *depot_test_suite(void);

/* Defined by a test program that has a child mode (optional): main() runs
** it instead of the suite when the program is started with arguments, as
** th_spawn() starts it, and returns what it returns.  argv[0] is the
** first argument. */
int depot_test_child(int argc, char **argv);

/* Start this program again, as a new process, with the arguments azArg
** (NULL-terminated, at most 14): its depot_test_child() runs them.  For a
** child that uses SQLite: a fork()ed copy of a process that has run
** threads (a KV engine's, the depot background compactor) may hold
** their mutexes and connections.  Descriptors without FD_CLOEXEC stay
** open in the child.  Returns its pid; fails the test if it cannot start. */
pid_t th_spawn(const char *const azArg[]);

/* A fresh, empty directory for this test under $DEPOT_TEST_TMPDIR (default
** "tests/tmp" below the current directory).  The returned path is
** sqlite3_malloc'd; it is not removed afterwards so a failure can be
** inspected (make clean removes tests/tmp). */
char *th_tmpdir(const char *zTag);

/* Open zPath (a filename or URI, flags READWRITE|CREATE|URI) with the
** extension registered through sqlite3_auto_extension.  Fails the test if
** it cannot. */
sqlite3 *th_open(const char *zPath);

/* Run zSql (one or more statements); fail the test with the message on
** error. */
void th_exec(sqlite3 *db, const char *zSql);

/* Run zSql; return its result code and, if pzErr, the error message
** (sqlite3_malloc'd, or NULL). */
int th_try(sqlite3 *db, const char *zSql, char **pzErr);

/* First column of the first row of zSql as text, sqlite3_malloc'd; NULL if
** the value is NULL or there is no row.  Fails the test on error. */
char *th_text(sqlite3 *db, const char *zSql);
/* th_exec, th_try and th_text of a statement formatted by sqlite3_mprintf
** (the statement text is freed). */
void th_execf(sqlite3 *db, const char *zFmt, ...);
int th_tryf(sqlite3 *db, char **pzErr, const char *zFmt, ...);
char *th_textf(sqlite3 *db, const char *zFmt, ...);
/* th_open of a path formatted by sqlite3_mprintf (the path is freed). */
sqlite3 *th_openf(const char *zFmt, ...);
/* Assert that zSql answers the text zWant. */
void th_text_is(sqlite3 *db, const char *zSql, const char *zWant);

/* First column of the first row of zSql as an integer; fails the test on
** error or when there is no row. */
sqlite3_int64 th_int(sqlite3 *db, const char *zSql);
/* th_int of the SQL made by sqlite3_mprintf(zFmt, ...). */
sqlite3_int64 th_intf(sqlite3 *db, const char *zFmt, ...);

/* True in a ThreadSanitizer build ($DEPOT_SANITIZER is "tsan").  Tests
** that fork a child and kill it with SIGKILL skip their kill rounds there:
** ThreadSanitizer supports fork() in a process that has run threads only
** partly, and those rounds prove durability, which the plain and the
** ASan+UBSan builds check. */
int th_under_tsan(void);
/* 1 in a build with AddressSanitizer (./configure --enable-sanitizers):
** its shadow memory and quarantine make RSS figures meaningless. */
int th_under_asan(void);

/* True under Valgrind memcheck ($DEPOT_SANITIZER is "valgrind", set by
** make valgrind).  Memcheck runs a program 20 to 50 times slower and runs
** its threads one at a time, so tests scale their loop counts and waits
** with th_scaled() and th_busy_ms(). */
int th_under_valgrind(void);

/* n, or n/nDiv (at least 1) under Valgrind: the iteration count of a
** stress or property loop, cut down so memcheck finishes it. */
int th_scaled(int n, int nDiv);

/* A busy timeout of ms milliseconds, ten times longer under Valgrind: a
** writer thread there can wait for a lock through many whole transactions
** of another thread (the lock is not fair and memcheck serialises
** threads), so a wait a plain build never approaches can run out. */
int th_busy_ms(int ms);

/* The number of entries of directory zDir whose names end in zSuffix (and
** are longer than it); fails the test when zDir cannot be listed. */
int th_count_suffix(const char *zDir, const char *zSuffix);

/* Path of the built loadable module ($DEPOT_MODULE), or NULL if unset. */
const char *th_module_path(void);

/* Registers (once) "faulty-default", a VFS over the default one, as the
** default VFS, so the store handles a test opens go through it.  Its Nth
** write (th_fault_writes = N) fails with SQLITE_IOERR_WRITE, its Nth sync
** (th_fault_syncs = N) with SQLITE_IOERR_FSYNC; each counts down once, 0
** is off, and th_fault_hits counts the failures injected. */
void th_fault_vfs(void);
extern int th_fault_writes, th_fault_syncs, th_fault_hits;

/* Waits (up to 20 s) until the process's background compactor has no
** request queued or running (a commit can queue one more while it works),
** and fails the test if it still has one. */
void th_compact_idle(void);

#endif /* DEPOT_TEST_HARNESS_H */
