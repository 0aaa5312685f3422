/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Writing a file whole or not at all (see pi0atomicfile.h): the temporary file, its fsync, the
 * rename and the directory's fsync. */
#include "common/pi0atomicfile.h"

#include "common/pi0file.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

namespace pi0
{

namespace
{

bool
fail (std::string *error, const std::string &path, const std::string &why)
{
  if (error)
    *error = path + ": " + why;
  return false;
}

std::string
errno_text (int err)
{
  return std::strerror (err);
}

/* fsync(), 0 or errno. EINVAL says the object cannot be synced (some file systems say it of a
 * directory): there is nothing to wait for, so it is no failure. */
int
sync_fd (int fd)
{
  if (::fsync (fd) == 0 || errno == EINVAL)
    return 0;
  return errno;
}

bool
sync_dir (const std::string &path, std::string *error)
{
  const std::string dir = parent_dir (path);
  const int fd = ::open (dir.c_str (), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return fail (error, path,
                 "cannot open its directory " + dir + " to sync it: " + errno_text (errno));
  const int err = sync_fd (fd);
  ::close (fd);
  if (err)
    return fail (error, path, "fsync of its directory " + dir + " failed: " + errno_text (err));
  return true;
}

bool
rename_file (const std::string &tmp_path, const std::string &path, std::string *error)
{
  if (::rename (tmp_path.c_str (), path.c_str ()) != 0)
    return fail (error, path, "cannot rename " + tmp_path + " into place: " + errno_text (errno));
  return true;
}

/* The temporary file until it is renamed: closed and removed on every way out before that,
 * an exception from the writer included. */
struct TempFile {
  std::string path; /* empty: nothing of ours to remove */
  int fd = -1;
  ~TempFile ()
  {
    if (fd >= 0)
      ::close (fd);
    if (!path.empty ())
      ::unlink (path.c_str ());
  }
};

bool
write_through (const std::string &path, const std::string &tmp_path, int flags,
               const FileWriter &write, std::string *error)
{
  TempFile tmp;
  tmp.fd = ::open (tmp_path.c_str (), O_WRONLY | O_CREAT | O_CLOEXEC | flags, 0666);
  if (tmp.fd < 0)
    return fail (error, path, "cannot create " + tmp_path + ": " + errno_text (errno));
  tmp.path = tmp_path;
  std::string why;
  if (!write (tmp.fd, &why))
    return fail (error, path, why);
  const int err = sync_fd (tmp.fd);
  if (err)
    return fail (error, path, "fsync failed: " + errno_text (err));
  /* The descriptor is released even when close() fails: never closed twice. */
  const int fd = tmp.fd;
  tmp.fd = -1;
  if (::close (fd) != 0)
    return fail (error, path, "close failed: " + errno_text (errno));
  if (!rename_file (tmp_path, path, error))
    return false;
  tmp.path.clear (); /* it is @path now */
  return sync_dir (path, error);
}

} // namespace

bool
write_file_atomic (const std::string &path, const FileWriter &write, std::string *error)
{
  static std::atomic<unsigned> counter{0};
  const std::string tmp_path =
      path + ".tmp-" + std::to_string (::getpid ()) + "-" + std::to_string (counter++);
  return write_through (path, tmp_path, O_EXCL, write, error);
}

bool
write_file_atomic (const std::string &path, const std::string &tmp_path, const FileWriter &write,
                   std::string *error)
{
  return write_through (path, tmp_path, O_TRUNC, write, error);
}

bool
publish_file (const std::string &tmp_path, const std::string &path, std::string *error)
{
  const int fd = ::open (tmp_path.c_str (), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return fail (error, path, "cannot open " + tmp_path + " to sync it: " + errno_text (errno));
  const int err = sync_fd (fd);
  ::close (fd);
  if (err)
    return fail (error, path, "fsync of " + tmp_path + " failed: " + errno_text (err));
  return rename_file (tmp_path, path, error) && sync_dir (path, error);
}

bool
write_all (int fd, const void *data, size_t size, std::string *error)
{
  const auto *p = static_cast<const unsigned char *> (data);
  while (size > 0) {
    /* Linux writes at most about 2 GiB a call. */
    const ssize_t w = ::write (fd, p, std::min<size_t> (size, size_t (1) << 30));
    if (w < 0) {
      if (errno == EINTR)
        continue;
      if (error)
        *error = "write failed: " + errno_text (errno);
      return false;
    }
    p += w;
    size -= static_cast<size_t> (w);
  }
  return true;
}

} // namespace pi0
