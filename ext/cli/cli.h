/*
** cli.h -- private interface of the `depot` command-line program
** (ext/cli/).  The program links the extension statically (libdepot_nt.la,
** -DSQLITE_CORE), registers it with sqlite3_auto_extension() and does all
** of its work through the extension's SQL functions on one in-memory
** connection; the only other call into the extension is the progress hook
** of vfs/depot_vfs.h.
**
**   main.c        the command table, option parsing, --help, dispatch
**   out.c         output: text, --json documents, errors, the progress bar
**   name.c        STORE:DB@BRANCH targets and --at points (txid, time, -10m)
**   cmd_data.c    import, export, shell
**   cmd_branch.c  branches, fork, log, restore-point, restore, rollback,
**                 drop-branch
**   cmd_store.c   verify, compact, gc, stats, du
**   cmd_kv.c      kv tables|stats|get|put|dump
**
** Exit codes: CLI_OK success, CLI_FAIL the operation failed (message on
** stderr), CLI_USAGE a usage error, CLI_FINDINGS verify found problems.
*/
#ifndef DEPOT_CLI_H
#define DEPOT_CLI_H

#include <sqlite3.h>

#define CLI_OK       0
#define CLI_FAIL     1
#define CLI_USAGE    2
#define CLI_FINDINGS 3

#define CLI_MAX_OPT  8            /* options one command line may give */

typedef struct Cli Cli;
struct Cli {
  sqlite3 *db;                    /* :memory:, with the extension */
  const char *zCmd;               /* the command's name ("kv get", ...) */
  int bJson;                      /* --json: one JSON document on stdout */
  int bQuiet;                     /* --quiet: no result text, no progress */
  int bProgress;                  /* stderr is a terminal and not quiet */
  int nOpt;
  const char *azOptName[CLI_MAX_OPT];
  const char *azOptVal[CLI_MAX_OPT];   /* NULL for a flag */
  sqlite3_str *pJson;             /* the document being built (--json) */
  int bJsonFirst;                 /* no field written yet */
};

/* ---- main.c ---- */
/* The value of option zName ("at", "db", ...), or NULL if not given; for a
** flag, "" when given. */
const char *cli_opt(Cli*, const char *zName);
/* Print "depot: <msg>" and the command's usage hint on stderr (and the
** error document with --json); returns CLI_USAGE. */
int cli_usage(Cli*, const char *zFmt, ...);

/* ---- out.c ---- */
/* Begin the --json document {"command":...; no-op in text mode. */
void out_begin(Cli*);
void out_str(Cli*, const char *zKey, const char *zVal);   /* NULL: null;
                        ** the value of "store" is shown by out_store() */
/* How output shows the store zStore: a PostgreSQL store's URI without its
** password (sqlite3_malloc'd). */
char *out_store(const char *zStore);
void out_int(Cli*, const char *zKey, sqlite3_int64 iVal);
void out_json(Cli*, const char *zKey, const char *zJson); /* raw JSON */
/* Print the document (--json); returns rc. */
int out_end(Cli*, int rc);
/* Text-mode output on stdout, unless --json or --quiet. */
void out_text(Cli*, const char *zFmt, ...);
/* Step pStmt to the end: with --json its rows become the array field
** zKey, one object per row keyed by column name; in text mode they are
** printed as an aligned table with a header (unless --quiet or bText 0).
** *pnRow gets the row count.  Returns SQLITE_OK or the step's error. */
int out_rows(Cli*, const char *zKey, sqlite3_stmt*, int bText, int *pnRow);
/* Report an operation failure: "depot: msg" on stderr, and with --json
** the document gets "error"; returns CLI_FAIL (the caller returns
** out_end(p, CLI_FAIL)). */
int out_fail(Cli*, const char *zFmt, ...);
/* A JSON string literal of z (sqlite3_malloc'd). */
char *out_quote(const char *z);

/* Run the long operation in pStmt (one step) with the progress bar on a
** terminal and SIGINT/SIGTERM turned into a stop request.  Returns the
** step's result code; *pbStopped is set when a signal asked to stop. */
int out_run_long(Cli*, sqlite3_stmt*, const char *zUnit, int *pbStopped);

/* ---- name.c ---- */
typedef struct CliTarget CliTarget;
struct CliTarget {
  char *zStore;                   /* sqlite3_malloc'd, all three */
  char *zDb;                      /* "main" when not given */
  char *zBranch;                  /* "main" when not given */
};
/* Parse STORE[:DB[@BRANCH]]: the ':' that separates is the last one (after
** the authority of a scheme://... store), the '@' the last one after it.
** SQLITE_OK, or SQLITE_ERROR with *pzErr (sqlite3_malloc'd). */
int cli_parse_target(const char *z, CliTarget *pOut, char **pzErr);
void cli_target_free(CliTarget*);
/* Bind --at value z to parameter i of pStmt: digits as an INTEGER txid, a
** relative time (-10m, -2h30m: s m h d w) as the UTC ISO-8601 time that
** long ago, anything else as TEXT (an ISO-8601 time or a restore point
** name).  SQLITE_OK, or SQLITE_ERROR with *pzErr for a malformed relative
** time. */
int cli_bind_at(sqlite3_stmt*, int i, const char *z, char **pzErr);
/* Nonzero if z looks like a local file path (not scheme://...). */
int cli_store_is_file(const char *zStore);

/* ---- the commands ---- */
int cmd_import(Cli*, int, char**);
int cmd_export(Cli*, int, char**);
int cmd_shell(Cli*, int, char**);
int cmd_branches(Cli*, int, char**);
int cmd_fork(Cli*, int, char**);
int cmd_log(Cli*, int, char**);
int cmd_restore_point(Cli*, int, char**);
int cmd_restore(Cli*, int, char**);
int cmd_rollback(Cli*, int, char**);
int cmd_drop_branch(Cli*, int, char**);
int cmd_verify(Cli*, int, char**);
int cmd_compact(Cli*, int, char**);
int cmd_gc(Cli*, int, char**);
int cmd_vacuum(Cli*, int, char**);
int cmd_stats(Cli*, int, char**);
int cmd_du(Cli*, int, char**);
int cmd_kv_tables(Cli*, int, char**);
int cmd_kv_stats(Cli*, int, char**);
int cmd_kv_get(Cli*, int, char**);
int cmd_kv_put(Cli*, int, char**);
int cmd_kv_dump(Cli*, int, char**);

/* Prepare zSql on p->db; on failure report it (out_fail) and return 0. */
sqlite3_stmt *cli_prepare(Cli*, const char *zSql);
/* Report the error of the last statement on p->db (out_fail). */
int cli_sql_fail(Cli*);

#endif /* DEPOT_CLI_H */
