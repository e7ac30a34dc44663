/*
** memfile.h -- journals, statement journals and temporary files of a depot
** database, kept in memory only (private to vfs/).
**
** A MemFile is an sqlite3_file that grows as it is written and is gone
** when closed.  It stays in memory up to MEMFILE_SPILL_BYTES; a write past
** that moves its bytes to an anonymous temporary file of the spill VFS
** (deleted on close, never synced), which serves it from then on, so a
** large transaction's journal or VACUUM's temporary database does not
** grow the process's memory.  When that file cannot be opened the bytes
** stay in memory.  A spilled file gathers adjacent writes in a 64 KiB
** buffer and writes them to the temporary file in one call (a journal
** record is three writes), before any read or truncation that needs them.  The main journal of a
** depot database tells its database when SQLite plays it back: a ROLLBACK
** plays the main journal back (pager_playback) after looking for a
** super-journal name, that is xFileSize, then a read of the 4 bytes 16
** from its end, before any other read; that read calls xRollback(pArg, 1).
** The journal being closed, truncated or overwritten from its start calls
** xRollback(pArg, 0): a rollback in progress is over.
*/
#ifndef DEPOT_MEMFILE_H
#define DEPOT_MEMFILE_H

#include <sqlite3.h>

/* Called on the main journal's owner: bStart 1 when a rollback starts,
** 0 when the journal is closed, truncated or rewritten from offset 0. */
typedef void (*MemRollbackFn)(void *pArg, int bStart);

/* Bytes a MemFile holds in memory before it moves to a temporary file. */
#define MEMFILE_SPILL_BYTES (1024*1024)

/* Bytes of a MemFile (for the VFS's szOsFile). */
int memfile_size(void);

/* Make pFile (memfile_size() bytes, all zero) an empty in-memory file;
** xRollback (may be NULL) with pArg for the main journal of a database;
** pSpill (may be NULL: never spills) the VFS of its temporary file. */
void memfile_open(sqlite3_file *pFile, MemRollbackFn xRollback, void *pArg,
                  sqlite3_vfs *pSpill);

/* 1 when pFile (a MemFile) has moved to a temporary file (for tests). */
int memfile_spilled(sqlite3_file *pFile);

#endif /* DEPOT_MEMFILE_H */
