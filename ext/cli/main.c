/*
** main.c -- entry point of the `depot` program: the command table (name,
** arguments, options, help text), option parsing, --help, dispatch.
**
**   depot [--json] [--quiet] COMMAND ARGS... [OPTIONS]
**
** Options may come anywhere after the command; "--" ends them.  Every
** command takes --json, --quiet and --help.  See docs/CLI.md.
*/
#include "config.h"
#include "ext/cli/cli.h"
#include "ext/depot.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct CliCmd CliCmd;
struct CliCmd {
  const char *zName;              /* "fork", "kv get" */
  const char *zArgs;              /* synopsis of the arguments */
  int nMin, nMax;                 /* positional arguments */
  const char *azOpt[4];           /* its options: "at=" takes a value */
  int (*xRun)(Cli*, int, char**);
  const char *zSummary;           /* one line, for `depot --help` */
  const char *zHelp;              /* the rest of `depot CMD --help` */
};

#define AT_HELP \
  "  AT is a txid (digits), an ISO-8601 time (2026-05-01T12:00:00Z, no\n" \
  "  zone means UTC), a relative time (-10m, -2h30m; units s m h d w) or\n" \
  "  a restore point name.\n"

static const CliCmd aCmd[] = {
  { "import", "FILE STORE", 2, 2, {"db="}, cmd_import,
    "copy a plain SQLite database into a store as one commit",
    "Copies the SQLite database FILE into database NAME (default main),\n"
    "branch main, of STORE (created if missing) as one commit: an import\n"
    "that fails or is interrupted (Ctrl-C) stores nothing, and a store it\n"
    "created is removed again.\n"
    "  --db NAME   the database in the store (NAME or BUCKET/NAME)\n" },
  { "export", "STORE[:DB[@BRANCH]] FILE", 2, 2, {0}, cmd_export,
    "write the head of a branch to a new plain SQLite file",
    "Writes the head of BRANCH (default main) of DB (default main) to the\n"
    "new file FILE, which must not exist.  An interrupted export removes\n"
    "what it wrote.\n" },
  { "branches", "STORE [DB]", 1, 2, {0}, cmd_branches,
    "list the branches of a store or of one database",
    "One line per branch record (live, frozen or dropped), in id order.\n" },
  { "fork", "STORE DB FROM NEW", 4, 4, {"at="}, cmd_fork,
    "create branch NEW of DB as a fork of branch FROM",
    "Forks branch FROM of DB at AT (default: its head) as branch NEW, in\n"
    "constant time.\n"
    "  --at AT     the fork point\n" AT_HELP },
  { "log", "STORE DB [BRANCH]", 2, 3, {"limit="}, cmd_log,
    "list the commits of a branch, newest first",
    "Lists the commits of BRANCH (default main) of DB, newest first.\n"
    "  --limit N   at most N commits (default 20; 0: all)\n" },
  { "restore-point", "STORE DB BRANCH NAME", 4, 4, {0}, cmd_restore_point,
    "pin the head of a branch under a name",
    "Pins the current head of BRANCH of DB as restore point NAME, usable\n"
    "later as --at NAME.\n" },
  { "restore", "STORE DB BRANCH", 3, 3, {"at="}, cmd_restore,
    "point a branch name at an earlier state (undoable)",
    "Moves the name BRANCH of DB to a fork of AT, keeping the old head as\n"
    "an undo restore point, whose name is printed.\n"
    "  --at AT     the state to restore (required)\n" AT_HELP },
  { "rollback", "STORE DB BRANCH", 3, 3, {"at="}, cmd_rollback,
    "move a branch name back to AT, or undo its last move",
    "With --at, moves the name BRANCH of DB to a fork of AT; without it,\n"
    "undoes the name's last restore or rollback.  Prints the new branch\n"
    "id.\n"
    "  --at AT     the state to roll back to\n" AT_HELP },
  { "drop-branch", "STORE DB [BRANCH]", 2, 3, {"id="}, cmd_drop_branch,
    "drop a branch by name, or a frozen branch by id",
    "Drops BRANCH of DB, or with --id the frozen branch of that id.  Its\n"
    "rows stay until `depot gc` reclaims them.\n"
    "  --id N      the id of a frozen branch (instead of BRANCH)\n" },
  { "verify", "STORE [DB [BRANCH]]", 1, 3, {0}, cmd_verify,
    "check every row of a store; exit 3 when something is wrong",
    "Reads the whole store (or the branches of DB, or BRANCH of DB) and\n"
    "prints each problem found.  Exit status 3 when there is any.\n" },
  { "compact", "STORE [DB [BRANCH]]", 1, 3, {0}, cmd_compact,
    "fold page deltas into shards",
    "Compacts every branch of the store, of DB, or BRANCH of DB.  Ctrl-C\n"
    "rolls back the job in progress (each job folds up to 4096 commits of\n"
    "one branch; jobs already installed stay).\n" },
  { "gc", "STORE", 1, 1, {0}, cmd_gc,
    "reclaim what nothing can read any more",
    "Deletes superseded shard versions, folded commit rows and dropped\n"
    "branches nothing pins, one branch per store transaction.\n" },
  { "vacuum", "STORE", 1, 1, {0}, cmd_vacuum,
    "give a store file's free pages back to the file system",
    "Rewrites the store file without its free pages (depot_vacuum) and\n"
    "truncates its -wal; run it after compact and gc.  Prints the physical\n"
    "bytes before and after.\n" },
  { "stats", "STORE", 1, 1, {0}, cmd_stats,
    "the store's counters (depot_stats)",
    "Databases, branches, stored and logical bytes, compaction lag,\n"
    "reclaimable bytes and quota use of the store.\n" },
  { "du", "STORE", 1, 1, {0}, cmd_du,
    "logical, stored and physical bytes per database and branch",
    "Per branch: logical bytes (pages x page size at the head) and stored\n"
    "bytes (its page blobs); per database the sums; for the store the\n"
    "physical bytes of its files (store, -wal, -shm).\n" },
  { "shell", "STORE[:DB[@BRANCH]]", 1, 1, {0}, cmd_shell,
    "open the sqlite3 shell on a branch, with the module loaded",
    "Runs the sqlite3 shell (from PATH) with the installed module loaded\n"
    "($DEPOT_MODULE overrides its path) on BRANCH of DB.\n" },
  { "kv tables", "DIR", 1, 1, {0}, cmd_kv_tables,
    "list the tables of a KV store",
    "One line per table of the KV store in directory DIR.\n" },
  { "kv stats", "DIR", 1, 1, {0}, cmd_kv_stats,
    "counters of a KV store and its tables (kv_stats)",
    "The kv_stats rows of the KV store in directory DIR.\n" },
  { "kv get", "DIR TABLE KEY", 3, 3, {"key-type="}, cmd_kv_get,
    "print the value of a key",
    "Prints the value of KEY in TABLE; exit status 1 if there is none.\n"
    "  --key-type T   text (default), int, real or hex (a blob)\n" },
  { "kv put", "DIR TABLE KEY VALUE", 4, 4,
    {"key-type=", "value-type=", "create"}, cmd_kv_put,
    "write a key in one transaction",
    "Writes KEY = VALUE in TABLE and commits.\n"
    "  --key-type T     text (default), int, real or hex (a blob)\n"
    "  --value-type T   text (default), int, real, hex or null\n"
    "  --create         create TABLE as a kv_btree table if missing\n" },
  { "kv dump", "DIR TABLE", 2, 2, {0}, cmd_kv_dump,
    "print every key and value of a table, in key order",
    "One line per row: key TAB value (blobs as x'..', NULL as NULL).\n" },
};
#define CLI_NCMD ((int)(sizeof(aCmd)/sizeof(aCmd[0])))

static const CliCmd *pCurCmd = 0;

static const char *zGlobalHelp =
  "Options of every command:\n"
  "  --json      print one JSON document (stable field names, docs/CLI.md)\n"
  "  --quiet     print nothing but errors (no result, no progress bar)\n"
  "  --help      this help\n"
  "Exit status: 0 success, 1 the operation failed, 2 usage error,\n"
  "3 verify found problems.\n";

static void cliProgramHelp(FILE *f){
  int i;
  fprintf(f, "usage: depot COMMAND ARGS... [OPTIONS]\n\n"
          "Branchable SQLite databases and KV stores from the terminal.\n\n"
          "Commands:\n");
  for(i=0; i<CLI_NCMD; i++){
    char z[64];
    snprintf(z, sizeof(z), "%s", aCmd[i].zName);
    fprintf(f, "  %-15s %s\n", z, aCmd[i].zSummary);
  }
  fprintf(f, "\nSTORE is a store file; DB is NAME or BUCKET/NAME;"
          " STORE:DB@BRANCH names a\nbranch (the last ':' and the last '@'"
          " separate; DB and BRANCH default to main).\n\n%s"
          "\n`depot COMMAND --help` describes one command.\n", zGlobalHelp);
}

static void cliCmdHelp(const CliCmd *c){
  int i;
  printf("usage: depot %s %s", c->zName, c->zArgs);
  for(i=0; i<4 && c->azOpt[i]; i++){
    size_t n = strlen(c->azOpt[i]);
    if( c->azOpt[i][n-1]=='=' ){
      printf(" [--%.*s VALUE]", (int)(n-1), c->azOpt[i]);
    }else{
      printf(" [--%s]", c->azOpt[i]);
    }
  }
  printf(" [--json] [--quiet]\n\n%s.\n\n%s\n%s", c->zSummary, c->zHelp,
         zGlobalHelp);
}

const char *cli_opt(Cli *p, const char *zName){
  int i;
  for(i=0; i<p->nOpt; i++){
    if( strcmp(p->azOptName[i], zName)==0 ){
      return p->azOptVal[i] ? p->azOptVal[i] : "";
    }
  }
  return 0;
}

int cli_usage(Cli *p, const char *zFmt, ...){
  va_list ap;
  char *z;
  va_start(ap, zFmt);
  z = sqlite3_vmprintf(zFmt, ap);
  va_end(ap);
  fprintf(stderr, "depot: %s\n", z ? z : "out of memory");
  if( pCurCmd ){
    fprintf(stderr, "usage: depot %s %s (see depot %s --help)\n",
            pCurCmd->zName, pCurCmd->zArgs, pCurCmd->zName);
  }else{
    fprintf(stderr, "see depot --help\n");
  }
  if( p->bJson ){
    char *zQ = out_quote(z ? z : "out of memory");
    char *zC = out_quote(p->zCmd ? p->zCmd : "");
    printf("{\"command\":%s,\"error\":%s,\"exit_code\":%d}\n",
           zC ? zC : "\"\"", zQ ? zQ : "\"\"", CLI_USAGE);
    sqlite3_free(zQ);
    sqlite3_free(zC);
  }
  sqlite3_free(z);
  return CLI_USAGE;
}

/* Is zOpt (without "--") an option of c?  1 value option, 2 flag, 0 no. */
static int cliOptKind(const CliCmd *c, const char *zOpt, size_t nOpt){
  int i;
  for(i=0; i<4 && c->azOpt[i]; i++){
    size_t n = strlen(c->azOpt[i]);
    int bVal = c->azOpt[i][n-1]=='=';
    if( bVal ) n--;
    if( n==nOpt && memcmp(c->azOpt[i], zOpt, n)==0 ) return bVal ? 1 : 2;
  }
  return 0;
}

/* Split argv into options (into p) and positionals (into azPos, *pnPos).
** Returns CLI_OK, CLI_USAGE, or -1 after --help was printed. */
static int cliParse(Cli *p, const CliCmd *c, int argc, char **argv,
                    char **azPos, int *pnPos){
  int i, bOpts = 1;
  *pnPos = 0;
  for(i=0; i<argc; i++){
    char *z = argv[i];
    const char *zName, *zEq;
    size_t nName;
    int eKind;
    if( !bOpts || z[0]!='-' || z[1]==0 ){
      azPos[(*pnPos)++] = z;
      continue;
    }
    if( strcmp(z, "--")==0 ){ bOpts = 0; continue; }
    if( strcmp(z, "--help")==0 || strcmp(z, "-h")==0 ){
      cliCmdHelp(c);
      return -1;
    }
    if( strcmp(z, "--json")==0 ){ p->bJson = 1; continue; }
    if( strcmp(z, "--quiet")==0 || strcmp(z, "-q")==0 ){
      p->bQuiet = 1;
      continue;
    }
    if( z[1]!='-' ) return cli_usage(p, "unknown option %s", z);
    zName = z+2;
    zEq = strchr(zName, '=');
    nName = zEq ? (size_t)(zEq-zName) : strlen(zName);
    eKind = cliOptKind(c, zName, nName);
    if( eKind==0 ){
      return cli_usage(p, "unknown option --%.*s for %s", (int)nName, zName,
                       c->zName);
    }
    if( p->nOpt>=CLI_MAX_OPT ) return cli_usage(p, "too many options");
    if( eKind==2 && zEq ){
      return cli_usage(p, "option --%.*s takes no value", (int)nName, zName);
    }
    if( eKind!=2 && zEq==0 && i+1>=argc ){
      return cli_usage(p, "option --%.*s needs a value", (int)nName, zName);
    }
    p->azOptName[p->nOpt] = sqlite3_mprintf("%.*s", (int)nName, zName);
    if( p->azOptName[p->nOpt]==0 ){
      fprintf(stderr, "depot: out of memory\n");
      return CLI_FAIL;
    }
    if( eKind==2 ){
      p->azOptVal[p->nOpt++] = 0;
    }else if( zEq ){
      p->azOptVal[p->nOpt++] = zEq+1;
    }else{
      p->azOptVal[p->nOpt++] = argv[++i];
    }
  }
  return CLI_OK;
}

/* The command named by argv[1] (and argv[2] for "kv ..."); *pnUsed gets
** how many words the name took. */
static const CliCmd *cliFind(int argc, char **argv, int *pnUsed){
  int i;
  char zName[64];
  *pnUsed = 1;
  if( strcmp(argv[1], "kv")==0 ){
    if( argc<3 || argv[2][0]=='-' ) return 0;
    snprintf(zName, sizeof(zName), "kv %s", argv[2]);
    *pnUsed = 2;
  }else{
    snprintf(zName, sizeof(zName), "%s", argv[1]);
  }
  for(i=0; i<CLI_NCMD; i++){
    if( strcmp(aCmd[i].zName, zName)==0 ) return &aCmd[i];
  }
  return 0;
}

static int cliRun(Cli *p, const CliCmd *c, int argc, char **argv){
  char **azPos;
  int nPos = 0, rc;
  azPos = sqlite3_malloc64(sizeof(char*)*(argc+1));
  if( azPos==0 ){
    fprintf(stderr, "depot: out of memory\n");
    return CLI_FAIL;
  }
  rc = cliParse(p, c, argc, argv, azPos, &nPos);
  if( rc==-1 ){
    rc = CLI_OK;
  }else if( rc==CLI_OK && nPos<c->nMin ){
    rc = cli_usage(p, "%s needs %d argument%s, got %d", c->zName, c->nMin,
                   c->nMin==1 ? "" : "s", nPos);
  }else if( rc==CLI_OK && nPos>c->nMax ){
    rc = cli_usage(p, "%s takes at most %d argument%s, got %d (unexpected"
                   " '%s')", c->zName, c->nMax, c->nMax==1 ? "" : "s", nPos,
                   azPos[c->nMax]);
  }else if( rc==CLI_OK ){
    p->bProgress = !p->bQuiet && isatty(2);
    if( sqlite3_open(":memory:", &p->db)!=SQLITE_OK ){
      fprintf(stderr, "depot: cannot open a connection: %s\n",
              sqlite3_errmsg(p->db));
      rc = CLI_FAIL;
    }else{
      rc = c->xRun(p, nPos, azPos);
    }
  }
  sqlite3_free(azPos);
  return rc;
}

int main(int argc, char **argv){
  Cli cli;
  const CliCmd *c;
  int nUsed = 0, rc, i;
  memset(&cli, 0, sizeof(cli));
  sqlite3_auto_extension((void(*)(void))sqlite3_depot_init);
  for(i=1; i<argc && argv[i][0]=='-'; i++){
    if( strcmp(argv[i], "--json")==0 ) cli.bJson = 1;
    else if( strcmp(argv[i], "--quiet")==0 || strcmp(argv[i], "-q")==0 ){
      cli.bQuiet = 1;
    }else if( strcmp(argv[i], "--help")==0 || strcmp(argv[i], "-h")==0 ){
      cliProgramHelp(stdout);
      return CLI_OK;
    }else if( strcmp(argv[i], "--version")==0 ){
      printf("depot %s (SQLite %s)\n", PACKAGE_VERSION, sqlite3_libversion());
      return CLI_OK;
    }else{
      return cli_usage(&cli, "unknown option %s", argv[i]);
    }
  }
  argc -= i-1;
  argv += i-1;
  if( argc<2 ){
    cliProgramHelp(stderr);
    return CLI_USAGE;
  }
  if( strcmp(argv[1], "help")==0 ){
    if( argc>2 && (c = cliFind(argc-1, argv+1, &nUsed))!=0 ){
      cliCmdHelp(c);
      return CLI_OK;
    }
    cliProgramHelp(stdout);
    return CLI_OK;
  }
  c = cliFind(argc, argv, &nUsed);
  if( c==0 ){
    cli.zCmd = argv[1];
    if( strcmp(argv[1], "kv")==0 ){
      return cli_usage(&cli, "kv needs a subcommand: tables, stats, get,"
                       " put or dump%s%s", argc>2 ? "; got " : "",
                       argc>2 ? argv[2] : "");
    }
    return cli_usage(&cli, "unknown command '%s'", argv[1]);
  }
  pCurCmd = c;
  cli.zCmd = c->zName;
  rc = cliRun(&cli, c, argc-1-nUsed, argv+1+nUsed);
  for(i=0; i<cli.nOpt; i++) sqlite3_free((char*)cli.azOptName[i]);
  sqlite3_close(cli.db);
  return rc;
}
