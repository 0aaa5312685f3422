/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "common/pi0file.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace pi0
{

namespace
{

const char *
kind_of (mode_t m)
{
  if (S_ISDIR (m))
    return "a directory";
  if (S_ISFIFO (m))
    return "a FIFO";
  if (S_ISCHR (m))
    return "a character device";
  if (S_ISBLK (m))
    return "a block device";
  if (S_ISSOCK (m))
    return "a socket";
  return "not a regular file";
}

bool
fail (std::string *error, const std::string &path, const std::string &why)
{
  if (error)
    *error = path + ": " + why;
  return false;
}

bool
not_regular (std::string *error, const std::string &path, mode_t m)
{
  return fail (error, path, std::string ("is ") + kind_of (m) + ", not a regular file");
}

} // namespace

bool
is_regular_file (const std::string &path, std::string *error)
{
  struct stat st;
  if (::stat (path.c_str (), &st) != 0)
    return fail (error, path, std::string ("cannot open: ") + std::strerror (errno));
  if (!S_ISREG (st.st_mode))
    return not_regular (error, path, st.st_mode);
  return true;
}

bool
path_exists (const std::string &path)
{
  struct stat st;
  return ::stat (path.c_str (), &st) == 0;
}

bool
is_directory (const std::string &path)
{
  struct stat st;
  return ::stat (path.c_str (), &st) == 0 && S_ISDIR (st.st_mode);
}

std::string
parent_dir (const std::string &path)
{
  const auto slash = path.find_last_of ('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr (0, slash);
}

bool
read_regular_file (const std::string &path, size_t max_bytes, std::string *out,
                   std::string *error)
{
  /* O_NONBLOCK: opening a FIFO with no writer returns at once instead of waiting for one. */
  const int fd = ::open (path.c_str (), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0)
    return fail (error, path, std::string ("cannot open: ") + std::strerror (errno));
  struct stat st;
  if (::fstat (fd, &st) != 0) {
    const int e = errno;
    ::close (fd);
    return fail (error, path, std::string ("cannot stat: ") + std::strerror (e));
  }
  if (!S_ISREG (st.st_mode)) {
    ::close (fd);
    return not_regular (error, path, st.st_mode);
  }
  if (static_cast<unsigned long long> (st.st_size) > max_bytes) {
    ::close (fd);
    return fail (error, path,
                 std::to_string (st.st_size) + " bytes is more than the " +
                     std::to_string (max_bytes) + " this file may have");
  }
  /* The size is a hint (the file may change while read): read to the end, never past the
   * cap. */
  std::string text;
  text.reserve (static_cast<size_t> (st.st_size));
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read (fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      const int e = errno;
      ::close (fd);
      return fail (error, path, std::string ("cannot read: ") + std::strerror (e));
    }
    if (n == 0)
      break;
    if (text.size () + static_cast<size_t> (n) > max_bytes) {
      ::close (fd);
      return fail (error, path,
                   "grew past the " + std::to_string (max_bytes) +
                       " bytes this file may have while it was read");
    }
    text.append (buf, static_cast<size_t> (n));
  }
  ::close (fd);
  *out = std::move (text);
  return true;
}

} // namespace pi0
