## wal/ -- the root write-ahead log of KV stores.
