// Package files is the file layer under every reader of the daemon: the
// registry of dataset formats, the resolution of a dataset's path into its
// files, the numbering of the units of a dataset's files one after the
// other, and the one way the daemon opens, maps, reads and writes the files
// a job names, confined to the operator's allowed roots (--allow-root).
//
// Confinement rests on os.Root: a path is resolved (symlinks followed), the
// allowed root that holds it is found, and the file is opened relative to an
// os.Root of it, which refuses any symlink that leads out. A check and the
// open that follows it therefore agree, whatever changes in between.
//
// The package imports nothing of the daemon's own.
package files
