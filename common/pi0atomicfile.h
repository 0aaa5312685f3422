/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The project's one way to put a file in place whole or not at all (LeRobot's metadata and
 * Parquet files, its videos, safetensors checkpoints): whoever opens the path, a loader or a
 * recorder restarted after a crash, finds the old file or the complete new one, never a part.
 * The recipe: a temporary file in the same directory (rename() is atomic only within one file
 * system), written, fsync'ed and closed, renamed over the path, then the directory fsync'ed, as
 * the rename is an entry in it and would otherwise not survive a power cut with the data.
 *
 * Returns false with *@error = "<path>: <why>" on failure (errno's text taken where the call
 * failed). The temporary file write_file_atomic made is gone then (publish_file leaves the file it
 * was given where it was), and @path is as it was unless only the directory's fsync failed.
 * No GLib, no GStreamer. */

#include <cstddef>
#include <functional>
#include <string>

namespace pi0
{

/* Fills the temporary file, open for writing at offset 0; write_file_atomic syncs and closes @fd
 * afterwards (a writer that hands it to a library that closes its streams gives it a dup()).
 * False with *@error = why, which the message gives after "<path>: ". It may throw: the temporary
 * file is removed and the exception goes on to the caller of write_file_atomic. */
using FileWriter = std::function<bool (int fd, std::string *error)>;

/* Writes @path through @write, in a temporary file named @path + ".tmp-<pid>-<n>", created
 * exclusively: writers in several threads or processes never share one. */
bool write_file_atomic (const std::string &path, const FileWriter &write, std::string *error);

/* The same with the temporary file named @tmp_path (in @path's directory; created or
 * truncated): for a caller that finds what a crash left behind by its name. */
bool write_file_atomic (const std::string &path, const std::string &tmp_path,
                        const FileWriter &write, std::string *error);

/* Puts @tmp_path, complete and written by someone else (an encoder), in place as @path by the
 * same recipe: fsync, rename, fsync of the directory. */
bool publish_file (const std::string &tmp_path, const std::string &path, std::string *error);

/* write(2) of all @size bytes (partial writes continued, EINTR retried), for a FileWriter:
 * false with *@error = "write failed: <errno's text>". */
bool write_all (int fd, const void *data, size_t size, std::string *error);

} // namespace pi0
