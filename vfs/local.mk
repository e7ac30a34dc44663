## vfs/ -- the depot VFS and its outer store.
